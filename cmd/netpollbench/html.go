package main

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// htmlReport is what report.html shows. Every part may be empty: it then
// shows a note that it did not run.
type htmlReport struct {
	Title      string
	Machine    []string // the machine and its calibration, before and after the run, once
	Warnings   []string // shown above everything, e.g. that the host changed speed
	Notes      []string // cells left out and why, -compare notes
	Failures   []string // measurements that failed
	Blocks     []block  // the verdict first, then each cell, then idle memory: tables
	Plots      []string // SVG files: each cell's latency spectrum, throughput, CPU per request, ...
	Frontier   []string // SVG files of the open-loop sweep: the frontier and the utilisation
	Herd       string   // the herd table
	HerdSeed   string   // the seed's figures, shown beside the herd table
	TableFiles []string // the full benchstat tables, files next to report.html
}

// writeHTML writes r to path as one self-contained page: the plots'
// SVG inline, the style in the page, no scripts, nothing fetched. A plot
// that cannot be read shows as a note saying so.
func writeHTML(path string, r htmlReport) error {
	page := struct {
		htmlReport
		Verdict                *htmlTable
		Cells                  []htmlTable
		PlotFigs, FrontierFigs []htmlFigure
		Tables                 []string
	}{htmlReport: r, PlotFigs: inlineFigures(r.Plots), FrontierFigs: inlineFigures(r.Frontier)}
	for _, b := range r.Blocks {
		t := newHTMLTable(b)
		if b.id == "verdict" {
			page.Verdict = &t
			continue
		}
		page.Cells = append(page.Cells, t)
	}
	if page.Title == "" {
		page.Title = "netpollbench report"
	}
	dir := filepath.Dir(path)
	for _, f := range r.TableFiles {
		if rel, err := filepath.Rel(dir, f); err == nil && filepath.IsAbs(f) {
			f = rel
		}
		page.Tables = append(page.Tables, filepath.ToSlash(f))
	}
	var b bytes.Buffer
	if err := reportPage.Execute(&b, page); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// htmlTable is a block for the page: cells classed by what they say (a
// verdict word colours its cell; numbers align right).
type htmlTable struct {
	block
	Rows [][]htmlCell
}

type htmlCell struct {
	Text, Class string
}

func newHTMLTable(b block) htmlTable {
	t := htmlTable{block: b}
	for _, r := range b.rows {
		var row []htmlCell
		for i, c := range r {
			class := "num"
			if b.leftAligned(i) {
				class = "text"
			}
			// A row under another (on demand's under the default's, in
			// the verdict) is indented in the text by spaces, which HTML
			// collapses: a class indents it instead.
			if t := strings.TrimLeft(c, " "); i == 0 && t != c {
				c, class = t, class+" sub"
			}
			for _, w := range []string{verdictWins, verdictLoses, verdictLevel, verdictUnresolved} {
				if strings.HasSuffix(c, " "+w) || strings.Contains(c, " "+w+" ") {
					class += " " + w
				}
			}
			row = append(row, htmlCell{c, class})
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// ID, Title, Notes, Head and Foot are the block's, for the template.
func (t htmlTable) ID() string      { return t.id }
func (t htmlTable) Title() string   { return t.title }
func (t htmlTable) Notes() []string { return t.notes }
func (t htmlTable) Head() []string  { return t.head }
func (t htmlTable) Foot() []string  { return t.foot }

// htmlFigure is a plot for the page: its SVG markup, or why it is missing.
type htmlFigure struct {
	Name    string
	SVG     template.HTML
	Missing string
}

func inlineFigures(paths []string) []htmlFigure {
	var figs []htmlFigure
	for _, p := range paths {
		svg, err := inlineSVG(p)
		f := htmlFigure{Name: filepath.Base(p), SVG: svg}
		if err != nil {
			f.Missing = err.Error()
		}
		figs = append(figs, f)
	}
	return figs
}

// xmlns matches the namespace declarations of an <svg> tag.
var xmlns = regexp.MustCompile(`\s+xmlns(:\w+)?="[^"]*"`)

// inlineSVG returns the markup of the SVG file at path to inline in HTML:
// its <svg> element, without the XML prologue before it and without the
// namespace declarations (HTML puts an inline <svg> in its namespace;
// the declarations are http URLs). The markup is trusted: it is the
// plots this command drew, whose text gonum escapes.
func inlineSVG(path string) (template.HTML, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	i := bytes.Index(b, []byte("<svg"))
	if i < 0 {
		return "", fmt.Errorf("%s: no <svg> element", path)
	}
	end := bytes.IndexByte(b[i:], '>')
	if end < 0 {
		return "", fmt.Errorf("%s: unterminated <svg> tag", path)
	}
	tag := xmlns.ReplaceAll(b[i:i+end], nil)
	return template.HTML(append(tag, b[i+end:]...)), nil
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; background: #fff; }
h1 { font-size: 1.5em; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1em; margin: 1.5em 0 .3em; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: 12px; line-height: 1.35; }
.machine { margin: 0; padding: 0; list-style: none; font-size: 14px; }
.warnings { border: 2px solid #c00; background: #fff0f0; padding: .2em 1em; }
.warnings li { color: #900; font-weight: bold; }
.missing { color: #666; font-style: italic; }
.note { font-size: 13px; color: #444; margin: .2em 0; }
table { border-collapse: collapse; font-size: 13px; margin: .4em 0; }
th, td { padding: .2em .6em; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
th { text-align: left; background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { text-align: left; font-variant-numeric: tabular-nums; }
td.sub { padding-left: 2em; }
td.wins { background: #e3f6e3; }
td.loses { background: #fbe3e3; }
td.level { background: #eef1f8; }
td.unresolved { color: #666; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #666; }
.beside { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.beside > div { flex: 0 1 auto; max-width: 100%; }
.scroll { overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{with .Warnings}}<div class="warnings" id="warnings"><ul>{{range .}}
<li>{{.}}</li>{{end}}
</ul></div>{{end}}

<section id="calibration">
{{if .Machine}}<ul class="machine">{{range .Machine}}
<li>{{.}}</li>{{end}}
</ul>{{else}}<p class="missing">Calibration: not run.</p>{{end}}
{{range .Notes}}<p class="note">Note: {{.}}</p>
{{end}}{{with .Failures}}<div class="warnings"><p>{{len .}} measurement(s) FAILED; they are missing below, and the run fails:</p><ul>{{range .}}
<li>{{.}}</li>{{end}}
</ul></div>{{end}}
</section>

<section id="summary">
{{with .Verdict}}{{template "table" .}}{{else}}<p class="missing">Summary: not run.</p>{{end}}
{{range .Cells}}{{template "table" .}}{{end}}
</section>

<section id="plots">
<h2>Plots</h2>
{{range .PlotFigs}}{{template "figure" .}}{{else}}<p class="missing">Plots: not run.</p>{{end}}
</section>

<section id="frontier">
<h2>Open-loop sweep: the frontier</h2>
{{range .FrontierFigs}}{{template "figure" .}}{{else}}<p class="missing">The open-loop sweep: not run.</p>{{end}}
</section>

<section id="herd">
<h2>Thundering herd</h2>
{{if .Herd}}<div class="beside">
<div><pre>{{.Herd}}</pre></div>
{{with .HerdSeed}}<div><pre>{{.}}</pre></div>{{end}}
</div>{{else}}<p class="missing">The herd experiment: not run.</p>{{end}}
</section>

<section id="tables">
<h2>Full tables</h2>
{{if .Tables}}<ul>{{range .Tables}}
<li><a href="{{.}}">{{.}}</a></li>{{end}}
</ul>{{else}}<p class="missing">Tables: not run.</p>{{end}}
</section>
</body>
</html>
{{define "table"}}<div class="block" id="{{.ID}}">
{{if eq .ID "verdict"}}<h2>{{.Title}}</h2>{{else}}<h3>{{.Title}}</h3>{{end}}
{{range .Notes}}<p class="note">{{.}}</p>
{{end}}<div class="scroll"><table>
<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}
<tr>{{range .}}<td class="{{.Class}}">{{.Text}}</td>{{end}}</tr>{{end}}
</tbody>
</table></div>
{{range .Foot}}<p class="note">{{.}}</p>
{{end}}</div>
{{end}}
{{define "figure"}}<figure>
{{if .Missing}}<p class="missing">{{.Name}}: missing ({{.Missing}}).</p>{{else}}{{.SVG}}
<figcaption>{{.Name}}</figcaption>{{end}}
</figure>
{{end}}`))
