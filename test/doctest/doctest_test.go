package doctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parse(t *testing.T, page string) []Block {
	t.Helper()
	blocks, err := Parse("page.md", strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

func TestParseCommandsAndOutput(t *testing.T) {
	page := "# Title\n" +
		"\n" +
		"```console\n" + // line 3
		"$ kubectl get subnetpools\n" +
		"NAME   CIDR\n" +
		"dc     10.0.0.0/16\n" +
		"$ kubectl create -f - <<EOF\n" + // line 7
		"kind: Subnet\n" +
		"$ not a prompt inside a here-document\n" +
		"EOF\n" +
		"subnet/x created\n" +
		"$ kubectl get sn \\\n" + // line 12
		">   -o wide\n" +
		"$ true\n" + // line 14
		"```\n" +
		"```sh\n" +
		"make dev\n" +
		"```\n"
	got := parse(t, page)
	want := []Block{
		{File: "page.md", Line: 3, Lang: "console", Commands: []Command{
			{Line: 4, Shell: "kubectl get subnetpools", Want: []string{"NAME   CIDR", "dc     10.0.0.0/16"}},
			{Line: 7, Shell: "kubectl create -f - <<EOF\nkind: Subnet\n$ not a prompt inside a here-document\nEOF", Want: []string{"subnet/x created"}},
			{Line: 12, Shell: "kubectl get sn \\\n  -o wide"},
			{Line: 14, Shell: "true"},
		}},
		{File: "page.md", Line: 16, Lang: "sh", Text: []string{"make dev"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	if !got[0].Runs() || got[1].Runs() {
		t.Errorf("Runs: console %v, sh %v; want true, false", got[0].Runs(), got[1].Runs())
	}
}

// A block inside a list item is indented; it is read all the same.
func TestParseIndentedBlock(t *testing.T) {
	got := parse(t, "- an item:\n\n  ```console\n  $ kubectl get sn\n  NAME\n    indented\n  ```\n")
	want := []Block{{File: "page.md", Line: 3, Lang: "console", Indent: "  ", Commands: []Command{{Line: 4, Shell: "kubectl get sn", Want: []string{"NAME", "  indented"}}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

func TestParseSkipMarker(t *testing.T) {
	got := parse(t, "<!-- doctest: skip (needs a cloud) -->\n\n```console\n$ clusterctl init\n```\n```console\n$ true\n```\n")
	if len(got) != 2 || got[0].Skip != "needs a cloud" || got[0].Runs() || got[1].Skip != "" || !got[1].Runs() {
		t.Errorf("got %+v; want the first block skipped for its reason, the second run", got)
	}
}

// A block marked to run in another environment is not run by TestDocs,
// only by the test that starts that environment.
func TestParseRunInMarker(t *testing.T) {
	got := parse(t, "<!-- doctest: run in dev-fleet -->\n```console\n$ kubectl get sn\n```\n```console\n$ true\n```\n")
	if len(got) != 2 || got[0].Environment != "dev-fleet" || got[0].Runs() || !got[0].RunsIn("dev-fleet") || !got[1].Runs() || got[1].RunsIn("dev-fleet") {
		t.Errorf("got %+v; want the first block run in dev-fleet only, the second by TestDocs only", got)
	}
}

func TestParseRefusesWhatItCannotRead(t *testing.T) {
	for name, page := range map[string]string{
		"skip without a reason":     "<!-- doctest: skip -->\n```console\n$ true\n```\n",
		"unknown directive":         "<!-- doctest: setup (x) -->\n```console\n$ true\n```\n",
		"marker before text":        "<!-- doctest: skip (x) -->\nSome prose.\n```console\n$ true\n```\n",
		"marker at the end":         "<!-- doctest: skip (x) -->\n",
		"run in no environment":     "<!-- doctest: run in -->\n```console\n$ true\n```\n",
		"console without a command": "```console\nNAME\n```\n",
		"unclosed block":            "```console\n$ true\n",
		"unterminated here-doc":     "```console\n$ cat <<EOF\nx\n```\n",
	} {
		t.Run(name, func(t *testing.T) {
			if blocks, err := Parse("page.md", strings.NewReader(page)); err == nil {
				t.Errorf("no error; blocks %+v", blocks)
			} else if !strings.HasPrefix(err.Error(), "page.md:") {
				t.Errorf("error %q does not say where", err)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"datacenter      10.0.0.0/16                      True    25    48640   10.0.64.0/18    48s": "datacenter 10.0.0.0/16 True 25 48640 10.0.64.0/18 <age>",
		"web   datacenter   10.0.1.0/24   24   Allocated   5m2s  ":                                   "web datacenter 10.0.1.0/24 24 Allocated <age>",
		"  Normal  Allocated  3d4h (x2 over 10d)  subnet-controller  msg":                            "  Normal Allocated <age> (x2 over <age>) subnet-controller msg",
		"  lastTransitionTime: \"2026-11-26T13:31:40Z\"":                                             "  lastTransitionTime: \"<time>\"",
		"Creation Timestamp:  Thu, 26 Nov 2026 13:31:40 +0000":                                       "Creation Timestamp: <time>",
		"notAfter=Feb  4 13:31:40 2027 GMT":                                                          "notAfter=<time>",
		"UID:  0b8e9c52-6f8e-4d4b-9b9a-0c1f8e2d7a11":                                                 "UID: <uid>",
		"subnet-operator-controller-manager-7d9fb5c4d8-x7k2p   1/1":                                  "subnet-operator-controller-manager-7d9fb5c4d8-<generated> 1/1",
		// Not volatile: figures, units inside words, ordinary names.
		"48640 free addresses in 11 blocks, 2^80, IPv4s, team-payments, demo-md-0-a, 10.20.0.0/16": "48640 free addresses in 11 blocks, 2^80, IPv4s, team-payments, demo-md-0-a, 10.20.0.0/16",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestMatch(t *testing.T) {
	got := []string{"NAME   AGE", "a      5s", "b      7m", ""}
	for _, tc := range []struct {
		want []string
		ok   bool
	}{
		{[]string{"NAME AGE", "a 48s", "b 2d"}, true},
		{[]string{"", "NAME AGE", "a 48s", "b 2d", ""}, true},
		{[]string{"NAME AGE", "..."}, true},
		{[]string{"...", "b 1s"}, true},
		{[]string{"NAME AGE", "  ...", "b 1s"}, true},
		{[]string{"NAME AGE", "...", "a 1s", "...", "b 1s"}, true},
		{[]string{"NAME AGE", "a 48s"}, false},              // a line missing
		{[]string{"NAME AGE", "a 48s", "c 2d"}, false},      // a line changed
		{[]string{"NAME AGE", "...", "c 2d"}, false},        // an ellipsis does not excuse a wrong line
		{[]string{"NAME AGE", "a 48s", "b 2d", "c"}, false}, // a line the command does not print
		{nil, false},
	} {
		if ok := Match(tc.want, got); ok != tc.ok {
			t.Errorf("Match(%q) = %v, want %v", tc.want, ok, tc.ok)
		}
	}
	if !Match(nil, []string{""}) {
		t.Error("an empty page output does not match a blank line")
	}
}

func TestReportSaysWhereAndWhat(t *testing.T) {
	r := Report("README.md:17", "kubectl get subnetpools", []string{"NAME   USED%", "dc     25"}, []string{"NAME   USED%", "dc     26"})
	for _, want := range []string{"README.md:17", "$ kubectl get subnetpools", "dc     25", "dc     26", "-", "+"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}

func TestLint(t *testing.T) {
	blocks := parse(t, "```sh\nmake dev\nkubectl get sn\n```\n"+
		"<!-- doctest: skip (a real cluster) -->\n```sh\nkubectl apply -f install.yaml\n```\n"+
		"```sh\nmake install-plugin   # builds kubectl-ipam\n```\n"+
		"<!-- doctest: skip (never run anyway) -->\n```yaml\nkind: Subnet\n```\n")
	got := Lint(blocks)
	want := []string{
		`page.md:3: a sh block runs kubectl ("kubectl get sn"): write it as a console block with its output, or mark it <!-- doctest: skip (why) -->`,
		"page.md:13: a skip marker on a yaml block, which is never run",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

// The project's own pages: every one parses, and none runs kubectl in a
// block the doc test would not check. (test/e2e's TestDocs runs them.)
func TestProjectPagesParseAndLint(t *testing.T) {
	pages, err := Pages(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 {
		t.Fatalf("found %d pages: %v", len(pages), pages)
	}
	sessions := 0
	for _, page := range pages {
		f, err := os.Open(filepath.Join("..", "..", page))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := Parse(page, f)
		f.Close()
		if err != nil {
			t.Error(err)
			continue
		}
		for _, problem := range Lint(blocks) {
			t.Error(problem)
		}
		for _, b := range blocks {
			if b.Runs() {
				sessions++
			}
		}
	}
	if sessions == 0 {
		t.Error("no console block runs in any page")
	}
}

func TestRewrite(t *testing.T) {
	page := "Intro\n" +
		"```console\n" +
		"$ kubectl get sn\n" + // line 3
		"NAME  AGE\n" +
		"old   1s\n" +
		"$ kubectl create -f - <<EOF\n" + // line 6
		"kind: Subnet\n" +
		"EOF\n" +
		"subnet/x created\n" +
		"$ kubectl describe sn x\n" + // line 10
		"Name: x\n" +
		"...\n" +
		"```\n" +
		"- item\n" +
		"  ```console\n" +
		"  $ true\n" + // line 16
		"  ```\n"
	blocks := parse(t, page)
	got := Rewrite(Lines(page), blocks, map[int][]string{
		3:  {"NAME  AGE", "new   2s", "more  3s"},
		6:  {"subnet/x created"},
		10: {"Name: y"}, // an ellipsis: left alone
		16: {"printed"},
	})
	want := "Intro\n```console\n$ kubectl get sn\nNAME  AGE\nnew   2s\nmore  3s\n$ kubectl create -f - <<EOF\nkind: Subnet\nEOF\nsubnet/x created\n" +
		"$ kubectl describe sn x\nName: x\n...\n```\n- item\n  ```console\n  $ true\n  printed\n  ```"
	if diff := cmp.Diff(Lines(want), got); diff != "" {
		t.Error(diff)
	}
}
