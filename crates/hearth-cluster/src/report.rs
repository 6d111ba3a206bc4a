//! The trace report: a summary CSV, memory over time as CSV, and an SVG
//! chart of memory over time per mode (plain SVG: a person opens it in a
//! browser).

use std::fmt::Write as _;
use std::path::Path;

use crate::sim::ModeReport;

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

pub fn summary_csv(reports: &[ModeReport]) -> String {
    summary_table(reports, ",")
        .iter()
        .map(|l| format!("{l}\n"))
        .collect()
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
    let mut out = String::from("time_s");
    for r in reports {
        let _ = write!(out, ",{}", label(r));
    }
    out.push('\n');
    let rows = reports.iter().map(|r| r.memory.len()).max().unwrap_or(0);
    for i in 0..rows {
        let t = reports
            .iter()
            .find_map(|r| r.memory.get(i))
            .map_or(0.0, |m| m.0);
        let _ = write!(out, "{t:.0}");
        for r in reports {
            match r.memory.get(i) {
                Some((_, gb)) => {
                    let _ = write!(out, ",{gb:.3}");
                }
                None => out.push(','),
            }
        }
        out.push('\n');
    }
    out
}

const COLORS: [&str; 8] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
];

/// A line chart of memory over time, one line per run, with the summary
/// figures in the legend.
pub fn memory_svg(title: &str, reports: &[ModeReport]) -> String {
    let (w, h, left, top, right, bottom) = (900.0, 480.0, 70.0, 40.0, 260.0, 50.0);
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

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes `summary.csv`, `memory.csv` and `memory.svg` into `dir`.
pub fn write(dir: &Path, title: &str, reports: &[ModeReport]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.csv"), summary_csv(reports))?;
    std::fs::write(dir.join("memory.csv"), memory_csv(reports))?;
    std::fs::write(dir.join("memory.svg"), memory_svg(title, reports))?;
    Ok(())
}
