// Command scaleplot draws the stage's scaling curves (docs/performance.md,
// "How cost grows") from the output of BenchmarkScale, and prints the best
// and the median run of each point as Markdown tables.
//
//	go -C tools/scaleplot run . ../../docs/scale/bench.txt ../../docs/scale
//
// The first argument is the benchmark output (go test -bench text, any
// number of runs of each point; other lines are ignored, so a document
// quoting the output serves as well); the second the directory the images
// are written to (SVG, or PNG with -format png). The curves go through the
// median run of each point; the tables give the best run (the highest rate
// or ratio, the lowest time) and the median, and for memory the median and
// the range.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// point is one benchmark point: a family ("partitions") and its x (4).
type point struct {
	family string
	x      float64
}

// results holds every run's value of each metric at each point.
type results map[point]map[string][]float64

// best is the best of vs: the highest rate or ratio, the lowest time.
func best(unit string, vs []float64) float64 {
	if lowerIsBetter[unit] {
		return slices.Min(vs)
	}
	return slices.Max(vs)
}

// median is the middle run (the lower middle of an even count). On the
// shared machine a single run can be an outlier either way, so the curves
// are drawn through medians.
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	return s[(len(s)-1)/2]
}

// lowerIsBetter names the metrics whose best run is the smallest.
var lowerIsBetter = map[string]bool{"restore-s": true, "ns/op": true}

// spread names the metrics that have no best run: a memory delta moves
// with when the collector and the OS took memory back, in either
// direction, so the table gives the median and the range.
var spread = map[string]bool{"heapB/held": true, "rssB/held": true, "rss-MiB": true, "peak-rise-MiB": true}

// BenchmarkRestoreCurve's points (1M–10M keys) extend the restore family.
var line = regexp.MustCompile(`^Benchmark(?:Scale|RestoreCurve)/([a-z]+)=(\d+)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		x, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", sc.Text(), err)
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("%q: metrics are not value-unit pairs", sc.Text())
		}
		p := point{m[1], x}
		if res[p] == nil {
			res[p] = map[string][]float64{}
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", sc.Text(), err)
			}
			res[p][f[i+1]] = append(res[p][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// series is the metric unit drawn as one line, and its legend.
type series struct{ unit, legend string }

// panel is one plot of a figure.
type panel struct {
	title, y string
	lines    []series
}

// figure is one image file: panels stacked over the same x axis.
type figure struct {
	file, family, x string // file: the name without its extension
	logX            bool
	panels          []panel
}

var throughput = panel{"throughput", "records/s", []series{{"stage-rec/s", "stage"}, {"plain-rec/s", "plain loop (control)"}}}
var ratios = panel{"stage ÷ control", "ratio", []series{{"ratio", "wall time"}, {"cpu-ratio", "CPU time"}}}

var figures = []figure{
	{"partitions", "partitions", "partitions per topic", true, []panel{throughput, ratios}},
	{"width", "width", "stamp width (offset entries)", true, []panel{throughput, ratios}},
	{"keys", "keys", "keys of state (fold)", true, []panel{throughput, ratios}},
	{"restore", "restore", "changelog keys restored into an empty store", true, []panel{
		{"throughput", "records/s", []series{{"restore-rec/s", "restore"}, {"read-rec/s", "plain read (control)"}}},
		{"wall time", "seconds", []series{{"restore-s", "restore"}}},
		{"control ÷ restore", "ratio", []series{{"ratio", "wall time"}, {"cpu-ratio", "CPU time"}}},
		{"memory", "MiB", []series{{"peak-rise-MiB", "peak resident rise during the restore"}}},
	}},
	{"held", "held", "records held", true, []panel{
		{"memory per held record", "bytes", []series{{"heapB/held", "Go heap"}, {"rssB/held", "resident (RSS)"}}},
		{"hold throughput", "records/s", []series{{"held-rec/s", "held and committed"}}},
	}},
}

func main() {
	format := flag.String("format", "svg", "image format: svg or png")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: scaleplot [-format svg|png] results.txt outdir")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *format != "svg" && *format != "png" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *format, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scaleplot:", err)
		os.Exit(1)
	}
}

func run(in, outDir, format string, table io.Writer) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(res) == 0 {
		return fmt.Errorf("%s: no BenchmarkScale lines", in)
	}
	for _, fig := range figures {
		xs := xsOf(res, fig.family)
		if len(xs) == 0 {
			continue
		}
		if err := draw1(res, fig, xs, filepath.Join(outDir, fig.file+"."+format)); err != nil {
			return fmt.Errorf("%s: %w", fig.file, err)
		}
		writeTable(table, res, fig, xs)
	}
	return nil
}

func xsOf(res results, family string) []float64 {
	var xs []float64
	for p := range res {
		if p.family == family {
			xs = append(xs, p.x)
		}
	}
	slices.Sort(xs)
	return xs
}

func draw1(res results, fig figure, xs []float64, path string) error {
	const w, h = 6 * vg.Inch, 3 * vg.Inch
	var plots [][]*plot.Plot
	for _, pn := range fig.panels {
		var args []any
		for _, s := range pn.lines {
			var pts plotter.XYs
			for _, x := range xs {
				if vs := res[point{fig.family, x}][s.unit]; len(vs) > 0 {
					pts = append(pts, plotter.XY{X: x, Y: median(vs)})
				}
			}
			if len(pts) > 0 {
				args = append(args, s.legend, pts)
			}
		}
		if len(args) == 0 {
			continue // nothing measured for this panel
		}
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = fig.x
		p.Y.Label.Text = pn.y
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
		if fig.logX {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = ticksAt(xs)
		}
		p.X.Min, p.X.Max = xs[0]/1.25, xs[len(xs)-1]*1.25
		p.Y.Min = min(p.Y.Min, 0)
		p.Y.Max *= 1.3 // room for the legend above the lines
		p.Legend.Top = true
		plots = append(plots, []*plot.Plot{p})
	}
	if len(plots) == 0 {
		return nil
	}
	width, height := w, h*vg.Length(len(plots))
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if filepath.Ext(path) == ".png" {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))}
	} else {
		c = vgsvg.New(width, height)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
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

func num(v float64) string {
	if v >= 1000 || v <= -1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ticksAt labels exactly the measured points.
type ticksAt []float64

func (t ticksAt) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, x := range t {
		ts = append(ts, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
	}
	return ts
}

func writeTable(w io.Writer, res results, fig figure, xs []float64) {
	var units []string
	for _, pn := range fig.panels {
		for _, s := range pn.lines {
			units = append(units, s.unit)
		}
	}
	fmt.Fprintf(w, "\n%s: best (median) of runs; memory: median (range)\n\n| %s | %s |\n|---:|%s\n", fig.family, fig.x, strings.Join(units, " | "), strings.Repeat("---:|", len(units)))
	for _, x := range xs {
		row := []string{strconv.FormatFloat(x, 'f', -1, 64)}
		for _, u := range units {
			vs := res[point{fig.family, x}][u]
			if len(vs) == 0 {
				row = append(row, "—")
				continue
			}
			if spread[u] {
				row = append(row, num(median(vs))+" ("+num(slices.Min(vs))+" to "+num(slices.Max(vs))+")")
			} else {
				row = append(row, num(best(u, vs))+" ("+num(median(vs))+")")
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}
