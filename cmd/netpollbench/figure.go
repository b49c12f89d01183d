package main

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The figure code every plot shares: layout (legend and caption off the
// data, titles whole), one colour and marker per configuration, tick
// labels and log axes.

// figure is one plot. Its log axes are linear axes over log10 of the data
// with ticks labelled in data units: gonum's LogScale misplaces the axis
// titles' glyph boxes and pads the plot out of shape. Its legend goes in a
// column right of the axes and its note under them, both off the data.
type figure struct {
	p          *plot.Plot
	file       string
	w, h       vg.Length            // the plot's size; wider if the title and legend need it, taller by the note
	logX, logY func(float64) string // tick labels of a log axis; nil: linear
	legend     plot.Legend
	series     int // legend entries
	labels     []pointLabel
	note       string // the caption: what the points and bars are
	err        error  // the first error of add, returned by save
}

func newFigure(file, title string, w, h vg.Length) *figure {
	f := &figure{p: plot.New(), file: file, w: w, h: h, legend: plot.NewLegend()}
	f.p.Title.Text = title
	f.legend.Top, f.legend.Left = true, true
	return f
}

// pointLabel is the text beside one point of a series.
type pointLabel struct {
	name string
	at   plotter.XY
	text string
}

// part is some points of a series: joined by a line or not, with error
// bars (relative to the points) if xerr or yerr is not nil, labelled
// point by point if labels is not nil, at the points or at labelX, and
// marked with the series' marker or, if not nil, with glyph.
type part struct {
	pts    plotter.XYs
	join   bool
	xerr   plotter.XErrors
	yerr   plotter.YErrors
	labels []string
	labelX []float64
	glyph  draw.GlyphDrawer
}

// add draws pt as part of the series name; its labels wait for the axes
// to be final (save). An error (a value that is not finite) is kept for
// save to return.
func (f *figure) add(name string, pt part) {
	if f.err != nil {
		return
	}
	ls, gs := look(name)
	if pt.join && len(pt.pts) > 1 {
		line, err := plotter.NewLine(pt.pts)
		if err != nil {
			f.err = fmt.Errorf("%s: %s: %w", f.file, name, err)
			return
		}
		line.LineStyle = ls
		f.p.Add(line)
	}
	bar := ls
	bar.Dashes, bar.Width = nil, vg.Points(1)
	if pt.xerr != nil {
		f.p.Add(&plotter.XErrorBars{XYs: pt.pts, XErrors: pt.xerr, LineStyle: bar, CapWidth: vg.Points(6)})
	}
	if pt.yerr != nil {
		f.p.Add(&plotter.YErrorBars{XYs: pt.pts, YErrors: pt.yerr, LineStyle: bar, CapWidth: vg.Points(6)})
	}
	points, err := plotter.NewScatter(pt.pts)
	if err != nil {
		f.err = fmt.Errorf("%s: %s: %w", f.file, name, err)
		return
	}
	points.GlyphStyle = gs
	if pt.glyph != nil {
		points.GlyphStyle.Shape = pt.glyph
	}
	f.p.Add(points)
	for j, l := range pt.labels {
		at := pt.pts[j]
		if pt.labelX != nil {
			at.X = pt.labelX[j]
		}
		f.labels = append(f.labels, pointLabel{name, at, l})
	}
}

// addLegend adds the series name to the legend.
func (f *figure) addLegend(name string) {
	f.legend.Add(name, thumbs(name)...)
	f.series++
}

// save sets the axes, labels the points, and writes the SVG: the plot,
// the legend in a column right of it, the note under both, wrapped.
func (f *figure) save(path string) error {
	if f.err != nil {
		return f.err
	}
	if f.logX != nil {
		logAxis(&f.p.X, f.logX)
	}
	if f.logY != nil {
		logAxis(&f.p.Y, f.logY)
	}
	pad := vg.Points(8)
	var legendW vg.Length
	if f.series > 0 {
		legendW = f.legend.Rectangle(draw.Canvas{}).Size().X + 2*pad
	}
	title := f.p.Title.TextStyle
	w := max(f.w, legendW+title.Width(f.p.Title.Text)+2*pad)
	noteStyle := f.p.X.Tick.Label
	noteStyle.XAlign, noteStyle.YAlign = draw.XLeft, draw.YBottom
	note := wrap(noteStyle, f.note, w-2*pad)
	var noteH vg.Length
	if note != "" {
		noteH = noteStyle.Height(note) + pad
	}
	c := vgsvg.New(w, f.h+noteH)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	area := draw.Crop(dc, 0, -legendW, noteH, 0)
	if err := f.placeLabels(f.p.DataCanvas(area)); err != nil {
		return err
	}
	f.p.Draw(area)
	if legendW > 0 {
		titleH := title.Rectangle(f.p.Title.Text).Size().Y + f.p.Title.Padding
		f.legend.Draw(draw.Crop(dc, w-legendW+pad, -pad, noteH, -titleH-pad))
	}
	if note != "" {
		dc.FillText(noteStyle, vg.Point{X: pad, Y: pad / 2}, note)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// wrap breaks s into lines no wider than width in sty.
func wrap(sty text.Style, s string, width vg.Length) string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			switch {
			case line == "":
				line = word
			case sty.Width(line+" "+word) > width:
				lines = append(lines, line)
				line = word
			default:
				line += " " + word
			}
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// placeLabels adds the labels, thinned out where points crowd, as they do
// where configurations perform alike: the labels of a series' points that
// nearly coincide become one ("2k, 10k"); a label goes right of its point,
// or below, or left, wherever it overlaps no label placed before it, and
// is left out if there is no such place. The markers and lines still tell
// the series apart. data is where the points are drawn.
func (f *figure) placeLabels(data draw.Canvas) error {
	trX, trY := f.p.Transforms(&data)
	at := func(xy plotter.XY) vg.Point { return vg.Point{X: trX(xy.X), Y: trY(xy.Y)} }
	var merged []pointLabel
	for _, l := range f.labels {
		k := slices.IndexFunc(merged, func(m pointLabel) bool {
			d := at(m.at).Sub(at(l.at))
			return m.name == l.name && math.Hypot(float64(d.X), float64(d.Y)) < 8
		})
		if k >= 0 {
			merged[k].text += ", " + l.text
			continue
		}
		merged = append(merged, l)
	}
	var taken []vg.Rectangle
	for _, l := range merged {
		lp, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{l.at}, Labels: []string{l.text}})
		if err != nil {
			return err
		}
		_, gs := look(l.name)
		lp.TextStyle[0].Color = gs.Color
		size := lp.TextStyle[0].Rectangle(l.text).Size()
		gap := vg.Points(6)
		for _, off := range []vg.Point{
			{X: gap, Y: 2}, {X: gap, Y: -size.Y - 2}, {X: -gap - size.X, Y: 2}, {X: -gap - size.X, Y: -size.Y - 2},
		} {
			min := at(l.at).Add(off)
			box := vg.Rectangle{Min: min, Max: min.Add(size)}
			if !slices.ContainsFunc(taken, func(r vg.Rectangle) bool { return overlap(r, box) }) {
				taken = append(taken, box)
				lp.Offset = off
				f.p.Add(lp)
				break
			}
		}
	}
	return nil
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// palette is the colour of each configuration, the same in every figure;
// the variants of a configuration get a lighter or darker shade of its
// colour, or a neighbouring hue.
var palette = map[string]color.Color{
	"net":              color.RGBA{0x22, 0x22, 0x22, 0xff},
	"et":               color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"et-noskip":        color.RGBA{0x7f, 0xb2, 0xdc, 0xff},
	"oneshot":          color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	"lt":               color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	"spin":             color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"auto":             color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	"auto-noskip":      color.RGBA{0xf5, 0xb0, 0x6c, 0xff},
	"inline":           color.RGBA{0x0b, 0x3d, 0x66, 0xff},
	"auto-inline":      color.RGBA{0xa6, 0x4b, 0x00, 0xff},
	"waitread":         color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	"ondemand":         color.RGBA{0x00, 0x6d, 0x5b, 0xff},
	"ondemand-go":      color.RGBA{0x66, 0xa6, 0x1e, 0xff},
	"ondemand-role":    color.RGBA{0xd9, 0x5f, 0x02, 0xff},
	"ondemand-poll":    color.RGBA{0x80, 0xcd, 0xc1, 0xff},
	"auto-cold":        color.RGBA{0xfd, 0xb4, 0x62, 0xff},
	"ondemand-inline":  color.RGBA{0x1b, 0x9e, 0x77, 0xff},
	"ondemand-loop":    color.RGBA{0x8c, 0x51, 0x0a, 0xff},
	"ondemand-net":     color.RGBA{0x66, 0xc2, 0xa5, 0xff},
	"ondemand-timeout": color.RGBA{0x00, 0x3c, 0x30, 0xff},
	"auto-timeout":     color.RGBA{0xe6, 0x9f, 0x00, 0xff},
	// The default built from -before's commit: auto's hue, greyed. The
	// other before-NAME take plotutil's colours.
	"before":    color.RGBA{0xb3, 0x8f, 0x6a, 0xff},
	"gnet":      color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	"nbio":      color.RGBA{0x94, 0x67, 0xbd, 0xff},
	"cloudwego": color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	"c":         color.RGBA{0xe3, 0x77, 0xc2, 0xff},
	// The runtime's rows take plotutil's colours, but rt-zeroread, which
	// joins the idle experiment's figure beside the buffer-free rows.
	"rt-zeroread": color.RGBA{0x8d, 0xa0, 0xcb, 0xff},
}

// look is the line and marker of the series name: its colour from the
// palette, its marker and dashes from its place in the servers table (a
// hash of the name for a series not in either).
func look(name string) (draw.LineStyle, draw.GlyphStyle) {
	i := slices.IndexFunc(servers, func(s server) bool { return s.name == name })
	if i < 0 {
		h := fnv.New32a()
		h.Write([]byte(name))
		i = int(h.Sum32() % 64)
	}
	c, ok := palette[name]
	if !ok {
		c = plotutil.Color(i)
	}
	ls := plotter.DefaultLineStyle
	ls.Color = c
	ls.Width = vg.Points(1.5)
	ls.Dashes = plotutil.Dashes(i)
	gs := plotter.DefaultGlyphStyle
	gs.Color = c
	gs.Shape = plotutil.Shape(i)
	gs.Radius = vg.Points(4)
	return ls, gs
}

// thumbs are the legend thumbnails of the series name: its line and marker.
func thumbs(name string) []plot.Thumbnailer {
	ls, gs := look(name)
	return []plot.Thumbnailer{&plotter.Line{LineStyle: ls}, &plotter.Scatter{GlyphStyle: gs}}
}

// kilo formats a count, thousands as k: 500, 2k, 30k.
func kilo(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// sig3 formats v to 3 significant digits, without an exponent: 0.5,
// 24.5, 1230.
func sig3(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// labelTicks mark a linear axis at round steps (1, 2, 2.5 or 5 times a
// power of ten), at most 8 of them, labelled by format, and halfway
// between them.
type labelTicks struct{ format func(float64) string }

func (t labelTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return []plot.Tick{{Value: min, Label: t.format(min)}}
	}
	p := math.Pow(10, math.Floor(math.Log10((max-min)/4)))
	step := p
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if (max-min)/(m*p) <= 8 {
			step = m * p
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(min / step * 2); i/2*step <= max; i++ {
		v := i / 2 * step
		tick := plot.Tick{Value: v}
		if math.Mod(i, 2) == 0 {
			tick.Label = t.format(v)
		}
		ticks = append(ticks, tick)
	}
	return ticks
}

// logAxis makes a, over log10 of the data, a log axis from the
// integer-times-power-of-ten steps around the data, labelled by format.
func logAxis(a *plot.Axis, format func(float64) string) {
	step := func(v float64) float64 { return math.Pow(10, math.Floor(math.Log10(v))) }
	lo := math.Pow(10, a.Min) * (1 + 1e-9)
	hi := math.Pow(10, a.Max) * (1 - 1e-9)
	a.Min = math.Log10(math.Floor(lo/step(lo)) * step(lo))
	a.Max = math.Log10(math.Ceil(hi/step(hi)) * step(hi))
	a.Tick.Marker = logTicks{format}
}

// logTicks marks an axis over log10 of the data at the integers times
// powers of ten, labelling 1, 2 and 5 times them (every mark, if the axis
// spans less than a decade or that labels fewer than two).
type logTicks struct{ format func(float64) string }

func (t logTicks) Ticks(min, max float64) []plot.Tick {
	lo, hi := math.Pow(10, min)*(1-1e-9), math.Pow(10, max)*(1+1e-9)
	var ticks []plot.Tick
	var values []float64
	labelled := 0
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for m := 1.0; m < 10; m++ {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			tick := plot.Tick{Value: math.Log10(v)}
			if m == 1 || m == 2 || m == 5 {
				tick.Label = t.format(v)
				labelled++
			}
			ticks = append(ticks, tick)
			values = append(values, v)
		}
	}
	if labelled < 2 || max-min < 1 {
		for i, v := range values {
			ticks[i].Label = t.format(v)
		}
	}
	return ticks
}
