package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/subnet-operator/subnet-operator/api/v1alpha2"
)

// BenchmarkValidatingHandler measures the validating webhook's HTTP handler
// in process, decode -> decide -> encode, for an explicit Subnet create in a
// pool that holds n Subnets: the freshness barrier (against an API stand-in
// that answers at once), the pool lookup and the overlap query. It reports
// the median and 99th percentile of the iterations next to the mean.
func BenchmarkValidatingHandler(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1_000, 10_000, 100_000} {
		w := newWorld()
		p := pool("p", "10.0.0.0/8")
		p.Spec.DefaultPrefixLength = ptr.To[int32](26)
		w.add(p)
		for i := range n {
			// Consecutive /26s from 10.0.0.0: n of them, then free space.
			third, fourth := (i/4)%256, (i%4)*64
			cidr := fmt.Sprintf("10.%d.%d.%d/26", i/1024, third, fourth)
			w.add(subnet(fmt.Sprintf("s%06d", i), "p", cidr))
		}
		w.ledger.MarkSynced()
		handler := admission.WithValidator[*ipamv1.Subnet](scheme, &SubnetValidator{Ledger: w.ledger, fresh: w.fresh(time.Second)})

		// Alternate a free range (allowed) and a taken one (denied, named).
		bodies := [][]byte{
			reviewBody(b, subnet("new", "p", "10.200.0.0/26")),
			reviewBody(b, subnet("new", "p", fmt.Sprintf("10.%d.0.0/24", (n/2)/1024))),
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var durations []time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(bodies[i%2])))
				durations = append(durations, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
				i++
			}
			slices.Sort(durations)
			b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

func reviewBody(b *testing.B, s *ipamv1.Subnet) []byte {
	raw, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bench", Operation: admissionv1.Create, Namespace: s.Namespace, Name: s.Name,
			Kind:     metav1.GroupVersionKind{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Kind: "Subnet"},
			Resource: metav1.GroupVersionResource{Group: "ipam.subnet-operator.io", Version: "v1alpha2", Resource: "subnets"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}
