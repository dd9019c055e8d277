//! PNG plots for benchmark reports, drawn with plotters. The font (DejaVu Sans, under its own
//! free license in assets/fonts/) is compiled in, so plots look the same on every machine and
//! need no system font library.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::error::Error;
use std::path::Path;
use std::sync::Once;

const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
/// Enough colors for every peer of the transport shootout.
const COLORS: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];

/// Draws a `size` picture with `draw` and writes it to `path` as a PNG (encoded by the png
/// crate: plotters' own encoder would pull in the whole image crate).
fn png(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), Box<dyn Error>>,
) -> Result<(), Box<dyn Error>> {
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        draw(&root)?;
        root.present()?;
    }
    let file = std::fs::File::create(path)
        .map_err(|e| format!("writing the plot {}: {e}", path.display()))?;
    let mut encoder = ::png::Encoder::new(std::io::BufWriter::new(file), size.0, size.1);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(&pixels)?;
    Ok(())
}

fn ensure_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font is a valid TrueType file compiled into the binary.
        register_font("sans-serif", FontStyle::Normal, FONT).ok().expect("bundled font parses");
    });
}

/// One chart of a grid: bars for each group, one bar per series, on a log scale.
pub struct Panel {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<(String, Vec<f64>)>,
}

/// Draws `panels` in a grid `columns` wide into a PNG at `path`.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    columns: usize,
    panels: &[Panel],
) -> Result<(), Box<dyn Error>> {
    ensure_font();
    let rows = panels.len().div_ceil(columns);
    let size = (560 * columns as u32, 400 * rows as u32 + 50);
    png(path, size, |root| {
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 26))?;
        for (panel, area) in panels.iter().zip(root.split_evenly((rows, columns)).iter()) {
            draw_panel(panel, area)?;
        }
        Ok(())
    })
}

fn draw_panel(
    panel: &Panel,
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
) -> Result<(), Box<dyn Error>> {
    let values = panel.series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 { (lo / 2.0, hi * 4.0) } else { (0.1, 10.0) };
    let groups = panel.groups.len();
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..groups as f64, (lo..hi).log_scale())?;
    let label = |x: &f64| {
        // Ticks fall on group centres (k + 0.5); other ticks get no label.
        let i = x.floor() as usize;
        if (x - x.floor() - 0.5).abs() < 1e-6 && i < groups {
            panel.groups[i].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * groups + 1)
        .x_label_formatter(&label)
        .y_desc(&panel.y_label)
        .y_labels(6)
        .y_label_formatter(&|v| short(*v))
        .label_style(("sans-serif", 14))
        .draw()?;
    let width = 0.8 / panel.series.len() as f64;
    for (s, (name, values)) in panel.series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        let bars = values.iter().enumerate().filter(|(_, v)| **v > 0.0).map(|(g, v)| {
            let x0 = g as f64 + 0.1 + s as f64 * width;
            Rectangle::new([(x0, lo), (x0 + width, *v)], color.filled())
        });
        chart
            .draw_series(bars)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        let texts = values.iter().enumerate().filter(|(_, v)| **v > 0.0).map(|(g, v)| {
            let x = g as f64 + 0.1 + (s as f64 + 0.5) * width;
            Text::new(
                short(*v),
                (x, *v * 1.15),
                ("sans-serif", 11).into_font().color(&BLACK).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Bottom,
                    ),
                ),
            )
        });
        chart.draw_series(texts)?;
    }
    if panel.series.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    Ok(())
}

/// A value in three significant characters or so: 950, 1.2k, 34k, 1.5M.
fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e4 => format!("{:.0}k", v / 1e3),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// Draws the CDF of each series into a PNG at `path`, with `marks` as vertical lines; the x
/// axis ends at the 99.9th percentile of the slowest series, or at `x_cut` if that is sooner
/// (curves leave the chart at the right edge where their tails go on).
pub fn cdf(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[(String, Vec<f64>)],
    marks: &[(String, f64)],
    x_cut: Option<f64>,
) -> Result<(), Box<dyn Error>> {
    ensure_font();
    png(path, (900, 560), |root| {
        root.fill(&WHITE)?;
        let sorted: Vec<(String, Vec<f64>)> = series
            .iter()
            .map(|(name, values)| {
                let mut v = values.clone();
                v.sort_by(f64::total_cmp);
                (name.clone(), v)
            })
            .collect();
        let x_max = sorted
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(_, v)| v[((v.len() as f64 * 0.999) as usize).min(v.len() - 1)])
            .fold(1.0f64, f64::max);
        let x_max = marks.iter().map(|(_, x)| *x).fold(x_max, f64::max);
        let x_max = x_cut.map_or(x_max, |cut| x_max.min(cut));
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..x_max * 1.05, 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("fraction of samples")
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (name, values)) in sorted.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let n = values.len().max(1) as f64;
            let points = values.iter().enumerate().map(|(k, v)| (*v, (k + 1) as f64 / n));
            chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?.label(name).legend(
                move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)),
            );
        }
        for (name, x) in marks {
            // A vertical line with its name at the top: a bound the curves are judged against.
            let line = [(*x, 0.0), (*x, 1.0)];
            chart.draw_series(LineSeries::new(line, BLACK.mix(0.6).stroke_width(1)))?;
            let label = Text::new(name.clone(), (*x, 0.98), ("sans-serif", 13));
            chart.draw_series(std::iter::once(label))?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// Draws lines through points, one per series, with horizontal reference lines (a budget, a
/// deadline), into a PNG at `path`.
pub fn lines(
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[(String, f64)],
) -> Result<(), Box<dyn Error>> {
    ensure_font();
    png(path, (900, 560), |root| {
        root.fill(&WHITE)?;
        let points = series.iter().flat_map(|(_, p)| p.iter().copied());
        let (x_max, y_max) = points.fold((1f64, 0f64), |(x, y), (px, py)| (x.max(px), y.max(py)));
        let y_max = marks.iter().map(|(_, y)| *y).fold(y_max, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max * 1.05, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (name, values)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let line = LineSeries::new(values.iter().copied(), color.stroke_width(2));
            chart.draw_series(line)?.label(name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
            let dots = values.iter().map(|p| Circle::new(*p, 4, color.filled()));
            chart.draw_series(dots)?;
        }
        for (name, y) in marks {
            let line = [(0.0, *y), (x_max * 1.05, *y)];
            chart.draw_series(LineSeries::new(line, BLACK.mix(0.6).stroke_width(1)))?;
            let label = Text::new(name.clone(), (x_max * 0.02, *y * 1.02), ("sans-serif", 13));
            chart.draw_series(std::iter::once(label))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
}

type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The series' names in a framed box at `position`.
fn legend<'a: 'b, 'b>(
    chart: &mut Chart<'b, 'a>,
    position: SeriesLabelPosition,
) -> Result<(), Box<dyn Error>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}
