// Package argocd tests the Argo CD health checks in config/argocd: the Lua
// scripts run in gopher-lua (the interpreter Argo CD embeds) against
// Subnets and SubnetPools in each state, and the kustomize Component merges
// them into argocd-cm under the keys Argo CD reads.
package argocd

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// health runs a health script against obj (JSON) as Argo CD does: obj is a
// global table, the script returns {status, message}.
func health(t *testing.T, script, obj string) (status, message string) {
	t.Helper()
	var o map[string]any
	if err := json.Unmarshal([]byte(obj), &o); err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, o))
	if err := L.DoFile(filepath.Join("..", "..", "config", "argocd", script)); err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("%s returned %v, want a table", script, L.Get(-1))
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message"))
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	}
	return lua.LNil
}

func subnet(generation int, status string) string {
	return `{"apiVersion":"ipam.subnet-operator.io/v1alpha2","kind":"Subnet","metadata":{"name":"web","generation":` +
		strconv.Itoa(generation) + `},"spec":{"poolRef":{"name":"plan"},"prefixLength":24}` + status + `}`
}

func TestSubnetHealth(t *testing.T) {
	ready := func(gen int, status, reason, msg string) string {
		return `,"status":{"observedGeneration":` + strconv.Itoa(gen) + `,"cidr":"10.0.1.0/24","conditions":[{"type":"Ready","status":"` +
			status + `","reason":"` + reason + `","message":"` + msg + `","observedGeneration":` + strconv.Itoa(gen) + `}]}`
	}
	for _, tt := range []struct {
		name, obj, want, message string
	}{
		{"no status yet", subnet(1, ""), "Progressing", "Waiting for the controller"},
		{"held", subnet(1, ready(1, "True", "Allocated", "holds it")), "Healthy", "Holds 10.0.1.0/24"},
		{"held, decided for an older generation", subnet(2, ready(1, "True", "Allocated", "")), "Progressing", "Waiting"},
		{"waits for its pool", subnet(1, ready(1, "False", "PoolNotFound", "SubnetPool ns/plan does not exist")), "Progressing", "PoolNotFound: SubnetPool ns/plan"},
		{"pool not ready", subnet(1, ready(1, "False", "PoolNotReady", "x")), "Progressing", "PoolNotReady"},
		{"lost to an overlap", subnet(1, ready(1, "False", "Overlaps", "10.0.1.0/24 overlaps Subnet ns/a")), "Degraded", "Overlaps: 10.0.1.0/24 overlaps"},
		{"pool exhausted", subnet(1, ready(1, "False", "PoolExhausted", "no free /24 block")), "Degraded", "PoolExhausted"},
		{"out of range", subnet(1, ready(1, "False", "OutOfRange", "lies outside")), "Degraded", "OutOfRange"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, message := health(t, "subnet-health.lua", tt.obj)
			if status != tt.want || !strings.Contains(message, tt.message) {
				t.Errorf("health = %s %q, want %s with %q", status, message, tt.want, tt.message)
			}
		})
	}
}

func TestSubnetPoolHealth(t *testing.T) {
	pool := func(gen int, conditions string) string {
		return `{"kind":"SubnetPool","metadata":{"name":"plan","generation":` + strconv.Itoa(gen) +
			`},"spec":{"cidr":"10.0.0.0/16"},"status":{"observedGeneration":1,"cidr":"10.0.0.0/16","utilization":"37.50%","conditions":[` + conditions + `]}}`
	}
	cond := func(typ, status, reason, msg string) string {
		return `{"type":"` + typ + `","status":"` + status + `","reason":"` + reason + `","message":"` + msg + `","observedGeneration":1}`
	}
	for _, tt := range []struct {
		name, obj, want, message string
	}{
		{"no status yet", `{"kind":"SubnetPool","metadata":{"generation":1},"spec":{"cidr":"10.0.0.0/16"}}`, "Progressing", "Waiting"},
		{"serving", pool(1, cond("Ready", "True", "Available", "serves")), "Healthy", "Serves 10.0.0.0/16, 37.50% used"},
		{"serving, spec edited since", pool(2, cond("Ready", "True", "Available", "serves")), "Progressing", "Waiting"},
		{"exhausted and overlapping, still serving",
			pool(1, cond("Ready", "True", "Available", "")+","+cond("Exhausted", "True", "NoFreeBlock", "no free /24 block left")+","+
				cond("Overlapping", "True", "ClaimsOverlap", "1 claims lose")),
			"Healthy", "exhausted: no free /24 block left; 1 claims lose"},
		{"serving its old range after a shrink", pool(1, cond("Ready", "True", "ClaimsOutside", "2 claims lie outside")), "Healthy", "ClaimsOutside: 2 claims"},
		{"waits for its parent", pool(1, cond("Ready", "False", "PoolNotFound", "SubnetPool ns/root does not exist")), "Progressing", "PoolNotFound"},
		{"being deleted", pool(1, cond("Ready", "False", "Terminating", "waiting for 2 Subnets")), "Progressing", "Terminating"},
		{"a cycle", pool(1, cond("Ready", "False", "Cycle", "a -> b -> a")), "Degraded", "Cycle: a -> b -> a"},
		{"refused by its parent", pool(1, cond("Ready", "False", "Overlaps", "overlaps SubnetPool ns/b")), "Degraded", "Overlaps"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, message := health(t, "subnetpool-health.lua", tt.obj)
			if status != tt.want || !strings.Contains(message, tt.message) {
				t.Errorf("health = %s %q, want %s with %q", status, message, tt.want, tt.message)
			}
		})
	}
}

// The Component merges the scripts into an existing argocd-cm, keeping its
// other keys, under the keys Argo CD reads (group_Kind).
func TestComponentMergesIntoArgoCDConfigMap(t *testing.T) {
	kubectl, err := filepath.Abs(filepath.Join("..", "..", "bin", "assets", "kubectl"))
	if err != nil {
		t.Fatal(err)
	}
	component, err := filepath.Abs(filepath.Join("..", "..", "config", "argocd"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As Argo CD's install.yaml has it: no namespace; the kustomization
	// that installs it sets one.
	write("argocd-cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  url: https://argocd.example.com\n")
	rel, err := filepath.Rel(dir, component)
	if err != nil {
		t.Fatal(err)
	}
	write("kustomization.yaml", "namespace: argocd\nresources:\n- argocd-cm.yaml\ncomponents:\n- "+rel+"\n")
	out, err := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize (run make tools): %v\n%s", err, out)
	}
	var cm struct {
		Metadata struct{ Name, Namespace string }
		Data     map[string]string
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Metadata.Name != "argocd-cm" || cm.Metadata.Namespace != "argocd" || cm.Data["url"] != "https://argocd.example.com" {
		t.Errorf("the merge changed the ConfigMap: %s", out)
	}
	for key, file := range map[string]string{
		"resource.customizations.health.ipam.subnet-operator.io_Subnet":     "subnet-health.lua",
		"resource.customizations.health.ipam.subnet-operator.io_SubnetPool": "subnetpool-health.lua",
	} {
		want, err := os.ReadFile(filepath.Join(component, file))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[key] != string(want) {
			t.Errorf("argocd-cm %s is not %s:\n%s", key, file, cm.Data[key])
		}
	}
}
