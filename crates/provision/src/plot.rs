//! PNG plots of simulation runs (feature `plot`): capacity over the day, and the
//! saving/guarantee trade-off. Pure Rust (plotters' bitmap backend, ab_glyph text); the only
//! thing needed at run time is a TrueType font file, by default Debian's
//! `fonts-dejavu-core` ([`DEFAULT_FONT`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::ProvisionError;
use crate::report::PAPER_TABLE_2;
use crate::sim::RunReport;

/// The font used when none is given (Debian package `fonts-dejavu-core`).
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

const FONT: &str = "sans-serif";
static REGISTERED: OnceLock<PathBuf> = OnceLock::new();

fn plot_error(path: &Path, e: impl core::fmt::Display) -> ProvisionError {
    ProvisionError::Plot { path: path.to_path_buf(), reason: e.to_string() }
}

/// Loads the TrueType font at `path` for all plots of this process (once; later calls with
/// another path keep the first font).
pub fn load_font(path: &Path) -> Result<(), ProvisionError> {
    if REGISTERED.get().is_some() {
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|e| {
        plot_error(
            path,
            format!("cannot read font ({e}); install Debian's fonts-dejavu-core or pass another .ttf"),
        )
    })?;
    // plotters keeps fonts for the life of the process; leak the one copy we register.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes)
        .map_err(|_| plot_error(path, "not a TrueType/OpenType font"))?;
    let _ = REGISTERED.set(path.to_path_buf());
    Ok(())
}

/// Line colour of a policy.
fn colour(policy: &str) -> RGBColor {
    match policy {
        "protego" => RGBColor(214, 39, 40),
        "protego-th" => RGBColor(255, 127, 14),
        "cloister" => RGBColor(31, 119, 180),
        _ => RGBColor(44, 160, 44),
    }
}

/// Plots, for one consolidation interval, aggregate demand against active capacity, the
/// pool of reserved nodes and the model's reserve `⌈C/TH⌉`, one panel per policy.
/// `model_reserve_gbps` is per minute; `trace_name` goes into the title.
pub fn capacity_plot(
    path: &Path,
    runs: &[&RunReport],
    model_reserve_gbps: &[f64],
    trace_name: &str,
) -> Result<(), ProvisionError> {
    let Some(first) = runs.first() else {
        return Ok(());
    };
    let panels = runs.len();
    let height = u32::try_from(60 + 330 * panels).unwrap_or(2000);
    let root = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let title = format!(
        "Demand vs capacity, consolidation every {} min ({} tunnels, {})",
        first.interval, first.tunnels, trace_name
    );
    let root = root.titled(&title, (FONT, 26)).map_err(|e| plot_error(path, e))?;
    let y_max = runs
        .iter()
        .flat_map(|r| r.series.reserved.iter().chain(&r.series.active))
        .chain(model_reserve_gbps)
        .copied()
        .fold(1.0, f64::max)
        * 1.08;
    let hours = first.minutes as f64 / 60.0;
    let at = |m: usize| m as f64 / 60.0;
    for (area, r) in root.split_evenly((panels, 1)).iter().zip(runs) {
        let caption = format!(
            "{}: active {:.1} Gbit/s on average, saving {:.2} %, 99th-pct guarantee {:.2} %, {:.0} migrations/h",
            r.policy,
            r.active_gbps,
            100.0 * r.saving,
            100.0 * r.guarantee_p99,
            r.migrations_per_hour
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT, 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..hours, 0.0..y_max)
            .map_err(|e| plot_error(path, e))?;
        chart
            .configure_mesh()
            .x_desc("time of day (h)")
            .y_desc("Gbit/s")
            .x_labels(13)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| plot_error(path, e))?;
        let c = colour(r.policy);
        chart
            .draw_series(DashedLineSeries::new(
                model_reserve_gbps.iter().enumerate().map(|(m, &v)| (at(m), v)),
                8,
                5,
                ShapeStyle::from(&RGBColor(120, 120, 120)).stroke_width(2),
            ))
            .map_err(|e| plot_error(path, e))?
            .label("model reserve: ⌈C/TH⌉ nodes")
            .legend(|(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], RGBColor(120, 120, 120).stroke_width(2))
            });
        chart
            .draw_series(LineSeries::new(
                r.series.reserved.iter().enumerate().map(|(m, &v)| (at(m), v)),
                c.mix(0.45).stroke_width(2),
            ))
            .map_err(|e| plot_error(path, e))?
            .label("reserved nodes (active + inactive + booting)")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.mix(0.45).stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                r.series.active.iter().enumerate().map(|(m, &v)| (at(m), v)),
                c.stroke_width(2),
            ))
            .map_err(|e| plot_error(path, e))?
            .label("active capacity")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                r.series.demand.iter().enumerate().map(|(m, &v)| (at(m), v)),
                BLACK.stroke_width(1),
            ))
            .map_err(|e| plot_error(path, e))?
            .label("aggregate demand")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(|e| plot_error(path, e))?;
    }
    root.present().map_err(|e| plot_error(path, e))?;
    Ok(())
}

/// Plots the 99th-percentile guarantee against resource saving, one curve per policy
/// through its consolidation intervals, with Protego's published Table 2 for reference and
/// the goal (≥ 85 % saving at ≥ 99 % guarantee).
pub fn tradeoff_plot(path: &Path, reports: &[RunReport], trace_name: &str) -> Result<(), ProvisionError> {
    let root = BitMapBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let points = reports
        .iter()
        .map(|r| (100.0 * r.saving, 100.0 * r.guarantee_p99))
        .chain(PAPER_TABLE_2.iter().map(|&(_, _, g, s)| (s, g)))
        .chain([(85.0, 99.0)]);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let (xm, ym) = (((x1 - x0) * 0.08).max(0.2), ((y1 - y0) * 0.08).max(0.1));
    let tunnels = reports.first().map_or(0, |r| r.tunnels);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Saving vs guarantee by consolidation interval ({tunnels} tunnels, {trace_name})"),
            (FONT, 24),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - xm)..(x1 + xm), (y0 - ym)..(y1 + ym).min(100.2))
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("resource saving vs dedicated 1+1 nodes (%)")
        .y_desc("daily bandwidth guarantee met by 99 % of tunnels (%)")
        .x_label_formatter(&|x| format!("{x:.1}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(DashedLineSeries::new([(85.0, y0 - ym), (85.0, y1 + ym)], 6, 4, grey.stroke_width(1)))
        .map_err(|e| plot_error(path, e))?
        .label("goal: saving ≥ 85 % and guarantee ≥ 99 % (upper right)")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(1)));
    chart
        .draw_series(DashedLineSeries::new([(x0 - xm, 99.0), (x1 + xm, 99.0)], 6, 4, grey.stroke_width(1)))
        .map_err(|e| plot_error(path, e))?;
    // The paper's own numbers (its production trace, not ours).
    let paper: Vec<(f64, f64, u32)> = PAPER_TABLE_2.iter().map(|&(iv, _, g, s)| (s, g, iv)).collect();
    let paper_colour = RGBColor(110, 110, 110);
    draw_curve(
        &mut chart,
        &paper,
        paper_colour,
        "Protego paper, Table 2 (production trace)",
        (7, -18),
        path,
    )?;
    let mut policies: Vec<&'static str> = Vec::new();
    for r in reports {
        if !policies.contains(&r.policy) {
            policies.push(r.policy);
        }
    }
    for p in policies {
        let mut pts: Vec<(f64, f64, u32)> = reports
            .iter()
            .filter(|r| r.policy == p)
            .map(|r| (100.0 * r.saving, 100.0 * r.guarantee_p99, r.interval))
            .collect();
        pts.sort_by_key(|&(_, _, iv)| iv);
        // Labels of neighbouring curves go on different sides.
        let offset = match p {
            "cloister" => (-10, -20),
            "protego-th" => (-10, 8),
            _ => (8, -6),
        };
        draw_curve(&mut chart, &pts, colour(p), &format!("{p} (this trace)"), offset, path)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()
        .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))?;
    Ok(())
}

type Chart<'a> = ChartContext<
    'a,
    BitMapBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A polyline through `(saving, guarantee, interval)` points, with markers and interval labels.
fn draw_curve(
    chart: &mut Chart<'_>,
    pts: &[(f64, f64, u32)],
    c: RGBColor,
    label: &str,
    offset: (i32, i32),
    path: &Path,
) -> Result<(), ProvisionError> {
    chart
        .draw_series(LineSeries::new(pts.iter().map(|&(x, y, _)| (x, y)), c.stroke_width(2)))
        .map_err(|e| plot_error(path, e))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    let style = (FONT, 14).into_font().color(&c);
    chart
        .draw_series(pts.iter().map(|&(x, y, iv)| {
            EmptyElement::at((x, y))
                + Circle::new((0, 0), 5, c.filled())
                + Text::new(format!("{iv}m"), offset, style.clone())
        }))
        .map_err(|e| plot_error(path, e))?;
    Ok(())
}
