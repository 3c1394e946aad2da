package controlplane

import (
	"slices"
	"testing"
)

// FreePorts gives distinct ports outside the kernel's ephemeral range, which
// outgoing connections draw from.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	low, high := lowestFreePort, portRangeEnd()
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	if len(slices.Compact(slices.Clone(ports))) != 20 {
		t.Errorf("ports not distinct: %v", ports)
	}
	if ports[0] < low || ports[len(ports)-1] >= high {
		t.Errorf("ports %v outside [%d, %d)", ports, low, high)
	}
}
