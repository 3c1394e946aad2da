// Package doctest reads the terminal sessions that README.md and docs/*.md
// show a user, so that a test can run them and compare what they print with
// what the page says.
//
// A session is a fenced block of type console. A line starting with "$ " is
// a command; the lines after it, up to the next command or the end of the
// block, are what it prints (stdout and stderr, as a terminal shows them).
// A command continues on the next line after a trailing backslash, and a
// here-document (<<EOF ... EOF) belongs to its command, not to the output:
//
//	```console
//	$ kubectl get subnetpool datacenter
//	NAME         CIDR          PARENT   READY   USED%   FREE    LARGEST FREE   AGE
//	datacenter   10.0.0.0/16            True    25      48640   10.0.64.0/18   48s
//	```
//
// Output is compared modulo what differs from run to run (Normalize): column
// padding, ages, timestamps, UIDs and the random suffixes Kubernetes
// generates. A line holding only "..." in the page stands for any number of
// lines, for output too long to show whole.
//
// A block that cannot run in a test says so, with the reason, in an HTML
// comment on the line before its fence (blank lines between are allowed):
//
//	<!-- doctest: skip (needs a real cluster's load balancer) -->
//
// Fenced shell blocks (sh, shell, bash) are command lists without output: a
// test does not run them, but Lint refuses one that runs kubectl without a
// skip marker, so that a command a user runs against the cluster is written
// as a console block, with its output, and tested.
package doctest

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is one fenced code block of a page.
type Block struct {
	// File and Line locate the opening fence (Line counts from 1).
	File string
	Line int
	// Lang is the fence's info string: console, sh, yaml, ...
	Lang string
	// Indent is the fence's indentation (a block inside a list item),
	// which every line of the block carries.
	Indent string
	// Skip is the reason given by a skip marker; empty if the block runs.
	Skip string
	// Environment names the environment a marker says the block runs in
	// (<!-- doctest: run in dev-fleet -->); empty: the e2e environment,
	// which TestDocs runs.
	Environment string
	// Commands are the block's commands with the output the page shows,
	// for a console block.
	Commands []Command
	// Text is the block's content, for other blocks.
	Text []string
}

// Command is one "$ " line of a console block and what it should print.
type Command struct {
	// Line is the line of the "$ " prompt in the page.
	Line int
	// Shell is the command as bash runs it: continuation lines and
	// here-documents included, prompts removed.
	Shell string
	// Want is the output the page shows, one string per line.
	Want []string
}

// Where names a command for a person: file:line.
func (b Block) Where(c Command) string { return fmt.Sprintf("%s:%d", b.File, c.Line) }

// Runs reports whether TestDocs runs the block: a console block without a
// skip marker, in the e2e environment.
func (b Block) Runs() bool { return b.RunsIn("") }

// RunsIn reports whether the block runs in the named environment ("" for
// the e2e environment).
func (b Block) RunsIn(environment string) bool {
	return b.Lang == "console" && b.Skip == "" && b.Environment == environment
}

var (
	// A fence may be indented (a block inside a list item); its content is
	// read without that indentation.
	fence     = regexp.MustCompile("^([ \\t]*)(```+|~~~+)\\s*([^`\\s]*)")
	marker    = regexp.MustCompile(`^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$`)
	skipWhy   = regexp.MustCompile(`^skip\s*\((.+)\)$`)
	runIn     = regexp.MustCompile(`^run in ([a-z][-a-z0-9]*)$`)
	heredocRe = regexp.MustCompile(`<<-?\s*(['"]?)([A-Za-z_][A-Za-z0-9_]*)(['"]?)`)
)

// Parse reads the fenced blocks of a Markdown page. name is used in
// positions and errors. A malformed marker, a marker that no block
// follows, a console block without a command, or an unterminated block or
// here-document is an error: a page the test cannot read must not pass.
func Parse(name string, r io.Reader) ([]Block, error) {
	var (
		blocks  []Block
		pending string // a skip reason waiting for its fence
		pendEnv string // an environment waiting for its fence
		pendAt  int
		cur     *Block
		closing string
		indent  string
		lineNo  int
		heredoc string // the delimiter a here-document waits for
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if cur == nil {
			if m := marker.FindStringSubmatch(line); m != nil {
				if pending != "" || pendEnv != "" {
					return nil, fmt.Errorf("%s:%d: doctest marker of line %d is followed by no block", name, lineNo, pendAt)
				}
				why, in := skipWhy.FindStringSubmatch(m[1]), runIn.FindStringSubmatch(m[1])
				switch {
				case in != nil:
					pendEnv = in[1]
				case why != nil && strings.TrimSpace(why[1]) != "":
					pending = strings.TrimSpace(why[1])
				default:
					return nil, fmt.Errorf("%s:%d: doctest marker %q: want \"skip (the reason)\" or \"run in <environment>\"", name, lineNo, m[1])
				}
				pendAt = lineNo
				continue
			}
			if m := fence.FindStringSubmatch(line); m != nil {
				cur = &Block{File: name, Line: lineNo, Lang: m[3], Indent: m[1], Skip: pending, Environment: pendEnv}
				indent, closing, pending, pendEnv = m[1], m[2], "", ""
				continue
			}
			if (pending != "" || pendEnv != "") && strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("%s:%d: doctest marker is followed by text, not by a fenced block", name, pendAt)
			}
			continue
		}
		line = strings.TrimPrefix(line, indent)
		if heredoc == "" && strings.HasPrefix(strings.TrimSpace(line), closing) && strings.Trim(strings.TrimSpace(line), closing[:1]) == "" {
			if cur.Lang == "console" && len(cur.Commands) == 0 {
				return nil, fmt.Errorf("%s:%d: console block without a \"$ \" command", name, cur.Line)
			}
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		if cur.Lang != "console" {
			cur.Text = append(cur.Text, line)
			continue
		}
		n := len(cur.Commands)
		switch {
		case heredoc != "":
			// A here-document's body and its delimiter are the command's.
			cur.Commands[n-1].Shell += "\n" + line
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
		case n > 0 && len(cur.Commands[n-1].Want) == 0 && strings.HasSuffix(cur.Commands[n-1].Shell, "\\"):
			// A continuation line: "> " is the prompt a shell shows for it.
			cur.Commands[n-1].Shell += "\n" + strings.TrimPrefix(line, "> ")
			heredoc = heredocDelimiter(line)
		case strings.HasPrefix(line, "$ ") || line == "$":
			cmd := strings.TrimPrefix(strings.TrimPrefix(line, "$"), " ")
			cur.Commands = append(cur.Commands, Command{Line: lineNo, Shell: cmd})
			heredoc = heredocDelimiter(cmd)
		case n == 0:
			return nil, fmt.Errorf("%s:%d: console block output before any \"$ \" command", name, lineNo)
		default:
			cur.Commands[n-1].Want = append(cur.Commands[n-1].Want, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cur != nil {
		if heredoc != "" {
			return nil, fmt.Errorf("%s:%d: here-document %s never ends", name, cur.Commands[len(cur.Commands)-1].Line, heredoc)
		}
		return nil, fmt.Errorf("%s:%d: fenced block never closed", name, cur.Line)
	}
	if pending != "" {
		return nil, fmt.Errorf("%s:%d: doctest marker is followed by no block", name, pendAt)
	}
	return blocks, nil
}

// heredocDelimiter returns the delimiter of a here-document that line
// starts, or "".
func heredocDelimiter(line string) string {
	if m := heredocRe.FindStringSubmatch(line); m != nil && m[1] == m[3] {
		return m[2]
	}
	return ""
}

// shellLangs are the fence types of command lists without output.
var shellLangs = map[string]bool{"sh": true, "shell": true, "bash": true, "zsh": true}

// runsKubectl matches a line of a command list that calls kubectl.
var runsKubectl = regexp.MustCompile(`^\s*(\$\s+)?kubectl\s`)

// Lint returns a problem for every block a test would not check although a
// user runs it against a cluster: a shell command list that calls kubectl
// without a skip marker (write it as a console block, with its output), and
// a skip marker on a block that is not a session.
func Lint(blocks []Block) []string {
	var out []string
	for _, b := range blocks {
		switch {
		case shellLangs[b.Lang] && b.Skip == "":
			for i, l := range b.Text {
				if runsKubectl.MatchString(l) {
					out = append(out, fmt.Sprintf("%s:%d: a %s block runs kubectl (%q): write it as a console block with its output, or mark it <!-- doctest: skip (why) -->",
						b.File, b.Line+1+i, b.Lang, strings.TrimSpace(l)))
					break
				}
			}
		case b.Skip != "" && b.Lang != "console" && !shellLangs[b.Lang]:
			out = append(out, fmt.Sprintf("%s:%d: a skip marker on a %s block, which is never run", b.File, b.Line, b.Lang))
		}
	}
	return out
}

// Pages returns the pages whose sessions are tested, relative to the
// repository root: README.md and docs/*.md (not docs/design, which records
// decisions rather than telling a user what to run).
func Pages(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	pages := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		pages = append(pages, filepath.ToSlash(rel))
	}
	return pages, nil
}

// WantLines returns the lines of the page (0-based, end exclusive) that
// hold c's expected output: after its prompt line, its continuation lines
// and its here-document.
func (c Command) WantLines() (start, end int) {
	start = c.Line + strings.Count(c.Shell, "\n") // the line after the command, 0-based
	return start, start + len(c.Want)
}

// Rewrite returns the page's lines with each command's expected output
// replaced by what it printed (got, by the command's prompt line), indented
// as its block is. A command whose expected output holds an ellipsis is
// left alone: what the ellipsis stands for is a person's choice. Rewrite
// is how the pages are brought up to date after the output changed on
// purpose; review its diff as any other.
func Rewrite(page []string, blocks []Block, got map[int][]string) []string {
	type edit struct {
		start, end int
		lines      []string
	}
	var edits []edit
	for _, b := range blocks {
		for _, c := range b.Commands {
			lines, ok := got[c.Line]
			if !ok || hasEllipsis(c.Want) {
				continue
			}
			start, end := c.WantLines()
			out := make([]string, len(lines))
			for i, l := range lines {
				out[i] = strings.TrimRight(b.Indent+l, " \t")
			}
			edits = append(edits, edit{start, end, out})
		}
	}
	out := append([]string(nil), page...)
	// From the bottom up, so that earlier positions stay valid.
	for i := len(edits) - 1; i >= 0; i-- {
		e := edits[i]
		out = append(out[:e.start], append(e.lines, out[e.end:]...)...)
	}
	return out
}

func hasEllipsis(want []string) bool {
	for _, l := range want {
		if strings.TrimSpace(l) == Ellipsis {
			return true
		}
	}
	return false
}
