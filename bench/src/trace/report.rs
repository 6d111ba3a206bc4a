//! The trace report: a summary CSV, memory over time as CSV (both through
//! the `csv` crate), and two SVG charts drawn with `plotters` (a person
//! opens them in a browser): memory over time per run, and the summary's
//! figures side by side as bars.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::sim::ModeReport;

/// The `p` quantile (0..=1) of `sorted` (ascending); zero when empty.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}

/// The summary's columns, named as in `summary.csv`, with one run's values.
fn summary_fields(r: &ModeReport) -> [(&'static str, String); 15] {
    [
        ("mode", r.mode.clone()),
        ("pool", r.pool.to_string()),
        ("invocations", r.invocations.to_string()),
        ("completed", r.completed.to_string()),
        ("rejected", r.rejected.to_string()),
        ("cold", r.cold.to_string()),
        ("from_pool", r.from_pool.to_string()),
        ("hot", r.hot.to_string()),
        ("p50_ms", r.p50_ms.to_string()),
        ("p99_ms", r.p99_ms.to_string()),
        ("mean_gb", format!("{:.3}", r.mean_gb)),
        ("peak_gb", format!("{:.3}", r.peak_gb)),
        ("gb_s", format!("{:.1}", r.gb_s)),
        ("density_per_gb_s", format!("{:.3}", r.density)),
        ("place_ns", format!("{:.0}", r.place_ns)),
    ]
}

/// A header line, then one line per run: the columns of [`summary_fields`]
/// between `sep`s.
fn summary_table(reports: &[ModeReport], sep: &str) -> Vec<String> {
    let Some(first) = reports.first() else {
        return Vec::new();
    };
    let line = |cells: Vec<String>| cells.join(sep);
    let mut out = vec![line(
        summary_fields(first)
            .iter()
            .map(|(h, _)| h.to_string())
            .collect(),
    )];
    out.extend(
        reports
            .iter()
            .map(|r| line(summary_fields(r).into_iter().map(|(_, v)| v).collect())),
    );
    out
}

/// One CSV written whole into memory (cannot fail: no I/O).
pub(super) fn csv_of(rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in rows {
        w.write_record(&row)
            .expect("writing CSV into memory cannot fail");
    }
    let bytes = w
        .into_inner()
        .expect("flushing CSV into memory cannot fail");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

pub fn summary_csv(reports: &[ModeReport]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let header = summary_fields(first)
        .iter()
        .map(|(h, _)| h.to_string())
        .collect();
    csv_of(
        std::iter::once(header).chain(
            reports
                .iter()
                .map(|r| summary_fields(r).into_iter().map(|(_, v)| v).collect()),
        ),
    )
}

/// The same summary as a Markdown table, for the terminal and RESULTS.md.
pub fn summary_markdown(reports: &[ModeReport]) -> String {
    let mut lines = summary_table(reports, " | ");
    if lines.is_empty() {
        return String::new();
    }
    let columns = summary_fields(&reports[0]).len();
    lines.insert(1, vec!["---"; columns].join(" | "));
    lines.iter().map(|l| format!("| {l} |\n")).collect()
}

fn label(r: &ModeReport) -> String {
    if r.pool > 0 {
        format!("{} + pool", r.mode)
    } else {
        r.mode.clone()
    }
}

/// `time_s` and one column of GB held per run.
pub fn memory_csv(reports: &[ModeReport]) -> String {
    let header = std::iter::once("time_s".to_string())
        .chain(reports.iter().map(label))
        .collect();
    let rows = reports.iter().map(|r| r.memory.len()).max().unwrap_or(0);
    let lines = (0..rows).map(|i| {
        let t = reports
            .iter()
            .find_map(|r| r.memory.get(i))
            .map_or(0.0, |m| m.0);
        std::iter::once(format!("{t:.0}"))
            .chain(reports.iter().map(|r| {
                r.memory
                    .get(i)
                    .map_or(String::new(), |(_, gb)| format!("{gb:.3}"))
            }))
            .collect()
    });
    csv_of(std::iter::once(header).chain(lines))
}

/// One color per run, the same in both charts (ColorBrewer's Dark2).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0xe7, 0x29, 0x8a),
    RGBColor(0x66, 0xa6, 0x1e),
    RGBColor(0xe6, 0xab, 0x02),
    RGBColor(0xa6, 0x76, 0x1d),
    RGBColor(0x66, 0x66, 0x66),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Draws into an SVG string of `size` with `draw`.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>>,
) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root).map_err(|e| anyhow::anyhow!("drawing a chart: {e}"))?;
        root.present()?;
    }
    Ok(out)
}

/// A line chart of memory over time, one line per run, with the summary
/// figures in the legend (above the lines: the y axis leaves room for it).
pub fn memory_svg(title: &str, reports: &[ModeReport]) -> anyhow::Result<String> {
    let t_max = reports
        .iter()
        .flat_map(|r| r.memory.last())
        .map(|m| m.0 / 60.0)
        .fold(1.0 / 60.0, f64::max);
    let gb_max = reports
        .iter()
        .flat_map(|r| r.memory.iter())
        .map(|m| m.1)
        .fold(0.001, f64::max);
    let headroom = 1.15 + 0.09 * reports.len() as f64;
    svg((1000, 480), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..t_max, 0.0..gb_max * headroom)?;
        chart
            .configure_mesh()
            .x_desc("time (min)")
            .y_desc("memory held (GB)")
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|m| format!("{m:.0}"))
            .y_label_formatter(&|gb| format!("{gb:.2}"))
            .draw()?;
        for (i, r) in reports.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    r.memory.iter().map(|&(t, gb)| (t / 60.0, gb)),
                    c.stroke_width(2),
                ))?
                .label(format!(
                    "{}: cold {} · mean {:.2} GB · p99 {} ms · {:.1} inv/GB·s",
                    label(r),
                    r.cold,
                    r.mean_gb,
                    r.p99_ms,
                    r.density
                ))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        Ok(())
    })
}

/// The figures `summary.svg` compares, each its own panel: a name, a unit
/// for the axis, and the value of one run.
type Figure = (&'static str, fn(&ModeReport) -> f64);

const FIGURES: [Figure; 4] = [
    ("cold starts", |r| r.cold as f64),
    ("starts from the pool", |r| r.from_pool as f64),
    ("mean memory held (GB)", |r| r.mean_gb),
    ("density (completed per GB·s)", |r| r.density),
];

/// One bar per run in each of [`FIGURES`]' panels, colored as in
/// `memory.svg`, each bar with its value above it: which mode wins on
/// which figure, at a glance. The runs' names are the legend below.
pub fn summary_svg(title: &str, reports: &[ModeReport]) -> anyhow::Result<String> {
    let legend_rows = reports.len().div_ceil(4) as u32;
    svg((1000, 360 + 24 * legend_rows), |root| {
        let root = root.titled(title, ("sans-serif", 16))?;
        let (panels, legend) = root.split_vertically(300);
        let n = reports.len().max(1);
        for ((name, value), panel) in FIGURES.iter().zip(panels.split_evenly((1, FIGURES.len()))) {
            // Room above the tallest bar for its value.
            let max = reports.iter().map(value).fold(0.0, f64::max);
            let top = if max > 0.0 { max * 1.15 } else { 1.0 };
            let mut chart = ChartBuilder::on(&panel)
                .caption(*name, ("sans-serif", 13).into_font().style(FontStyle::Bold))
                .margin(8)
                .y_label_area_size(45)
                .build_cartesian_2d(0.0..n as f64, 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(TRANSPARENT)
                .disable_x_axis()
                .y_labels(5)
                .y_label_formatter(&|v| short(*v))
                .draw()?;
            let label_style = ("sans-serif", 10)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series(reports.iter().enumerate().map(|(i, r)| {
                let x = i as f64;
                Rectangle::new([(x + 0.05, 0.0), (x + 0.95, value(r))], color(i).filled())
            }))?;
            chart.draw_series(reports.iter().enumerate().map(|(i, r)| {
                let v = value(r);
                Text::new(short(v), (i as f64 + 0.5, v), label_style.clone())
            }))?;
        }
        let cells = legend.split_evenly((legend_rows.max(1) as usize, 4));
        for ((i, r), cell) in reports.iter().enumerate().zip(cells) {
            cell.draw(
                &(EmptyElement::at((10, 6))
                    + Rectangle::new([(0, 0), (12, 12)], color(i).filled())
                    + Text::new(label(r), (18, 0), ("sans-serif", 12))),
            )?;
        }
        Ok(())
    })
}

/// A bar's value in at most about five characters.
fn short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Writes `summary.csv`, `summary.svg`, `memory.csv` and `memory.svg`
/// into `dir`; `title` names the trace.
pub fn write(dir: &Path, title: &str, reports: &[ModeReport]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.csv"), summary_csv(reports))?;
    std::fs::write(
        dir.join("summary.svg"),
        summary_svg(&format!("Per run, {title}"), reports)?,
    )?;
    std::fs::write(dir.join("memory.csv"), memory_csv(reports))?;
    std::fs::write(
        dir.join("memory.svg"),
        memory_svg(&format!("Memory held, {title}"), reports)?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: &str, cold: u64, mean_gb: f64) -> ModeReport {
        ModeReport {
            mode: mode.into(),
            cold,
            mean_gb,
            density: 1.0 / mean_gb,
            ..ModeReport::default()
        }
    }

    /// The bar heights of `svg` in order: the rects filled with a run's
    /// color that are not the legend's 12-pixel squares.
    fn bars(svg: &str) -> Vec<f64> {
        let attr = |rect: &str, name: &str| -> String {
            let v = rect.split(&format!(" {name}=\"")).nth(1).unwrap();
            v[..v.find('"').unwrap()].to_string()
        };
        svg.split("<rect")
            .skip(1)
            .filter(|r| attr(r, "fill") != "#FFFFFF" && attr(r, "width") != "12")
            .map(|r| attr(r, "height").parse().unwrap())
            .collect()
    }

    #[test]
    fn each_panel_scales_its_bars_to_its_largest_value() {
        let reports = [run("tenant", 10, 2.0), run("none", 40, 8.0)];
        let svg = summary_svg("t", &reports).unwrap();
        let h = bars(&svg);
        assert_eq!(h.len(), FIGURES.len() * reports.len(), "{svg}");
        // cold starts: 10 vs 40; from the pool: both 0; memory 2 vs 8;
        // density 0.5 vs 0.125. Heights are whole pixels.
        assert!(
            h[1] > 100.0 && h[1] == h[5],
            "the largest of each panel is as tall: {h:?}"
        );
        assert!((h[0] * 4.0 - h[1]).abs() <= 4.0, "{h:?}");
        assert_eq!((h[2], h[3]), (0.0, 0.0));
        assert!((h[7] * 4.0 - h[6]).abs() <= 4.0, "{h:?}");
        assert!(svg.contains("\ntenant\n") && svg.contains("\nnone\n"));
        assert!(
            svg.contains("\n40\n") && svg.contains("\n0.125\n"),
            "values above the bars"
        );
    }

    #[test]
    fn the_memory_chart_has_a_line_and_a_legend_entry_per_run() {
        let mut a = run("tenant", 10, 2.0);
        a.memory = vec![(0.0, 1.0), (60.0, 2.0), (120.0, 1.5)];
        let mut b = run("none", 40, 8.0);
        b.memory = vec![(0.0, 4.0), (60.0, 8.0), (120.0, 6.0)];
        let svg = memory_svg("t", &[a, b]).unwrap();
        for i in 0..2 {
            let RGBColor(r, g, b) = color(i);
            let stroke =
                format!("<polyline fill=\"none\" opacity=\"1\" stroke=\"#{r:02X}{g:02X}{b:02X}\"");
            assert_eq!(svg.matches(&stroke).count(), 1, "run {i}'s line: {svg}");
        }
        assert!(svg.contains("tenant: cold 10 · mean 2.00 GB"), "{svg}");
        assert!(svg.contains("none: cold 40 · mean 8.00 GB"), "{svg}");
        assert_eq!(short(0.125), "0.125");
        assert_eq!(short(40.0), "40");
        assert_eq!(short(123_456.0), "123k");
    }
}
