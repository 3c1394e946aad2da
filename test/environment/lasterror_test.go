package environment

import "testing"

func TestLastErrorNamesWhyAManagerExited(t *testing.T) {
	for _, tc := range []struct{ name, log, want string }{
		{"the last error line", "{\"level\":\"info\",\"msg\":\"a\"}\n{\"level\":\"error\",\"msg\":\"Manager stopped\",\"error\":\"boom\"}\n{\"level\":\"info\",\"msg\":\"b\"}\n",
			`{"level":"error","msg":"Manager stopped","error":"boom"}`},
		{"no error: the last line", "first\nsecond\n", "second"},
		{"nothing logged", "", "(it logged nothing)"},
	} {
		if got := lastError([]byte(tc.log)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
