//! The trace report: a summary CSV, memory over time as CSV (both through
//! the `csv` crate), and two SVG charts (plain SVG written here: a person
//! opens them in a browser): memory over time per run, and the summary's
//! figures side by side as bars.

use std::fmt::Write as _;
use std::path::Path;

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

const COLORS: [&str; 8] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
];

/// A line chart of memory over time, one line per run, with the summary
/// figures in the legend.
pub fn memory_svg(title: &str, reports: &[ModeReport]) -> String {
    let (w, h, left, top, right, bottom) = (1000.0, 480.0, 70.0, 40.0, 330.0, 50.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let t_max = reports
        .iter()
        .flat_map(|r| r.memory.last())
        .map(|m| m.0)
        .fold(1.0, f64::max);
    let gb_max = reports
        .iter()
        .flat_map(|r| r.memory.iter())
        .map(|m| m.1)
        .fold(0.001, f64::max)
        * 1.1;
    let x = |t: f64| left + pw * t / t_max;
    let y = |gb: f64| top + ph * (1.0 - gb / gb_max);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{left}" y="22" font-size="15">{}</text>
<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>
"#,
        xml(title),
        top + ph,
        left + pw,
        top + ph,
        top + ph
    );
    for k in 0..=4 {
        let gb = gb_max * k as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{gb:.2} GB</text>"#,
            left - 6.0,
            y(gb) + 4.0
        );
        let t = t_max * k as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{:.0} min</text>"#,
            x(t),
            top + ph + 18.0,
            t / 60.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time</text>"#,
        left + pw / 2.0,
        h - 8.0
    );
    for (i, r) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: String = r
            .memory
            .iter()
            .map(|(t, gb)| format!("{:.1},{:.1} ", x(*t), y(*gb)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>"#
        );
        let ly = top + 10.0 + i as f64 * 44.0;
        let lx = left + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{color}"/>"#,
            ly - 10.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{ly}">{}</text>"#,
            lx + 18.0,
            xml(&label(r))
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="10">cold {} · mean {:.2} GB · p99 {} ms · {:.1} inv/GB·s</text>"#,
            lx + 18.0,
            ly + 15.0,
            r.cold,
            r.mean_gb,
            r.p99_ms,
            r.density
        );
    }
    s.push_str("</svg>\n");
    s
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
/// which figure, at a glance.
pub fn summary_svg(title: &str, reports: &[ModeReport]) -> String {
    let (panel_w, panel_h, gap, top, bottom, legend) = (230.0, 260.0, 30.0, 50.0, 30.0, 24.0);
    let rows = reports.len().div_ceil(4) as f64;
    let w = FIGURES.len() as f64 * (panel_w + gap) + gap;
    let h = top + panel_h + bottom + rows * legend + 10.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{gap}" y="22" font-size="15">{}</text>
"#,
        xml(title)
    );
    let bar_w = panel_w / reports.len().max(1) as f64;
    let base = top + panel_h;
    for (k, (name, value)) in FIGURES.iter().enumerate() {
        let x0 = gap + k as f64 * (panel_w + gap);
        let max = reports.iter().map(value).fold(0.0, f64::max);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{}</text>
<line x1="{x0}" y1="{base}" x2="{}" y2="{base}" stroke="black"/>"#,
            x0 + panel_w / 2.0,
            top - 8.0,
            xml(name),
            x0 + panel_w
        );
        for (i, r) in reports.iter().enumerate() {
            let v = value(r);
            // Room above the tallest bar for its value.
            let bh = if max > 0.0 {
                (panel_h - 20.0) * v / max
            } else {
                0.0
            };
            let x = x0 + i as f64 * bar_w;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                x + 2.0,
                base - bh,
                bar_w - 4.0,
                COLORS[i % COLORS.len()],
                x + bar_w / 2.0,
                base - bh - 4.0,
                short(v)
            );
        }
    }
    for (i, r) in reports.iter().enumerate() {
        let (col, row) = ((i % 4) as f64, (i / 4) as f64);
        let lx = gap + col * (panel_w + gap);
        let ly = base + bottom + row * legend;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/>
<text x="{}" y="{ly}">{}</text>"#,
            ly - 10.0,
            COLORS[i % COLORS.len()],
            lx + 18.0,
            xml(&label(r))
        );
    }
    s.push_str("</svg>\n");
    s
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

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes `summary.csv`, `summary.svg`, `memory.csv` and `memory.svg`
/// into `dir`; `title` names the trace.
pub fn write(dir: &Path, title: &str, reports: &[ModeReport]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.csv"), summary_csv(reports))?;
    std::fs::write(
        dir.join("summary.svg"),
        summary_svg(&format!("Per run, {title}"), reports),
    )?;
    std::fs::write(dir.join("memory.csv"), memory_csv(reports))?;
    std::fs::write(
        dir.join("memory.svg"),
        memory_svg(&format!("Memory held, {title}"), reports),
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

    /// The bar heights of `svg` in order (the bars are the rects with a
    /// fractional width; the legend's squares are 12 wide).
    fn bars(svg: &str) -> Vec<f64> {
        svg.lines()
            .filter(|l| l.starts_with("<rect x=") && !l.contains(r#"width="12""#))
            .map(|l| {
                let h = l.split("height=\"").nth(1).unwrap();
                h[..h.find('"').unwrap()].parse().unwrap()
            })
            .collect()
    }

    #[test]
    fn each_panel_scales_its_bars_to_its_largest_value() {
        let reports = [run("tenant", 10, 2.0), run("none", 40, 8.0)];
        let svg = summary_svg("t", &reports);
        let h = bars(&svg);
        assert_eq!(h.len(), FIGURES.len() * reports.len(), "{svg}");
        // cold starts: 10 vs 40; from the pool: both 0; memory 2 vs 8;
        // density 0.5 vs 0.125.
        assert_eq!(h[1], h[5], "the largest of each panel is full height");
        assert!((h[0] * 4.0 - h[1]).abs() < 0.5, "{h:?}");
        assert_eq!((h[2], h[3]), (0.0, 0.0));
        assert!((h[7] * 4.0 - h[6]).abs() < 0.5, "{h:?}");
        assert!(svg.contains(">tenant<") && svg.contains(">none<"));
        assert_eq!(short(0.125), "0.125");
        assert_eq!(short(40.0), "40");
        assert_eq!(short(123_456.0), "123k");
    }
}
