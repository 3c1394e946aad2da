package doctest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-cmp/cmp"
)

// What changes from run to run, and what a page writes in its place after
// Normalize. Each is narrow on purpose: a pattern that matched ordinary
// words or figures would let a wrong page pass.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	// RFC 3339 (status, events, -o yaml) and the RFC 1123 form of
	// kubectl describe.
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d [+-]\d{4}`), "<time>"},
	// openssl's dates (x509 -enddate).
	{regexp.MustCompile(`\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d \d{4} GMT`), "<time>"},
	{regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uid>"},
	// Names with a suffix from generateName: five characters of the
	// alphabet Kubernetes draws them from (no vowels, no 0, 1, 3).
	{regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}\b`), "-<generated>"},
	// Ages as kubectl prints them (AGE columns, events): 48s, 5m2s, 3d4h,
	// 10y; a whole field, not part of a word or a figure with a unit.
	{regexp.MustCompile(`(^|[\s(])(\d+[smhdy])+(\s|$|\))`), "${1}<age>${3}"},
}

// Normalize makes one line of output comparable: the volatile parts
// replaced, runs of spaces after the indentation (column padding) collapsed
// to one, trailing space removed. Indentation is kept: it is structure in
// YAML and JSON.
func Normalize(line string) string {
	rest := strings.TrimLeft(line, " \t")
	line = line[:len(line)-len(rest)] + strings.Join(strings.Fields(rest), " ")
	for _, v := range volatile {
		// Twice: adjacent ages share the space between them.
		line = v.re.ReplaceAllString(line, v.with)
		line = v.re.ReplaceAllString(line, v.with)
	}
	return line
}

// Ellipsis is a line of a page's output (indented or not) that stands for
// any number of lines.
const Ellipsis = "..."

// Lines splits output into lines, without the final newline's empty line.
func Lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Match reports whether got (a command's output) is what want (the page's
// lines) shows, modulo Normalize and ellipses. Blank lines at either end
// are ignored, as a reader cannot see them.
func Match(want, got []string) bool {
	return match(normalizeAll(trimBlank(want)), normalizeAll(trimBlank(got)))
}

func match(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == Ellipsis {
		for i := 0; i <= len(got); i++ {
			if match(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && want[0] == got[0] && match(want[1:], got[1:])
}

// Report explains a mismatch for a person fixing the page: where, the
// command, the output the page shows and the output it printed, verbatim,
// and a line diff of the two after Normalize.
func Report(where, shell string, want, got []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the output of\n  $ %s\ndiffers from the page's.\n", where, strings.ReplaceAll(shell, "\n", "\n  > "))
	fmt.Fprintf(&b, "--- the page shows:\n%s\n", indent(want))
	fmt.Fprintf(&b, "+++ the command printed:\n%s\n", indent(got))
	fmt.Fprintf(&b, "diff after normalizing (- page, + printed):\n%s", cmp.Diff(normalizeAll(trimBlank(want)), normalizeAll(trimBlank(got))))
	return b.String()
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "  (nothing)"
	}
	return "  " + strings.Join(lines, "\n  ")
}

func normalizeAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = Normalize(l)
	}
	return out
}

func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
