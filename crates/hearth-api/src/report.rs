//! The trace bench's report charts (`hearth-bench trace`, Hydra §5.2), for
//! the console's Cluster page: the operator points `--trace-report` at the
//! directory the bench wrote, and its `summary.svg` and `memory.svg` are
//! served from there, to admin tokens only.
//!
//! Only those two names are ever joined to the directory, and a chart is
//! sent as an image with a policy that runs nothing in it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use crate::error::ErrorBody;
use crate::{ApiError, AppState};

/// The charts a report holds.
pub const CHARTS: [&str; 2] = ["summary.svg", "memory.svg"];

/// No chart the bench draws comes near this; a larger file is not one.
const MAX_CHART_BYTES: u64 = 8 << 20;

/// One chart of the trace bench's report (admin)
///
/// `summary.svg` (cold starts, memory and density per colocation mode) or
/// `memory.svg` (memory held over the trace), from the directory given to
/// `--trace-report`. 404 says what is missing: the setting, or a report.
#[utoipa::path(get, path = "/v1/cluster/trace-report/{chart}", tag = "cluster",
    params(("chart" = String, Path, description = "`summary.svg` or `memory.svg`")),
    responses((status = 200, content_type = "image/svg+xml", description = "The chart"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn chart(
    State(s): State<Arc<AppState>>,
    Path(chart): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = s.auth.caller(s.node.store(), &headers).await?;
    if !p.is_admin() {
        return Err(ApiError::Forbidden(
            "the trace report is the operator's: it needs an admin token".into(),
        ));
    }
    let Some(name) = CHARTS.into_iter().find(|c| *c == chart) else {
        return Err(ApiError::NotFound(format!(
            "no chart {chart:?}: a trace report has {}",
            CHARTS.join(" and ")
        )));
    };
    let Some(dir) = &s.config.trace_report else {
        return Err(ApiError::NotFound(
            "no trace report: start Hearth with --trace-report DIR, the --out directory of \
             `hearth-bench trace`"
                .into(),
        ));
    };
    let path = dir.join(name);
    let missing = || {
        ApiError::NotFound(format!(
            "{} has no {name} yet: run `hearth-bench trace --out {}`",
            dir.display(),
            dir.display()
        ))
    };
    let file = tokio::fs::File::open(&path).await.map_err(|_| missing())?;
    if !file.metadata().await.is_ok_and(|m| m.is_file()) {
        return Err(missing());
    }
    // Read up to the bound and no further, however the file grows.
    let mut bytes = Vec::new();
    file.take(MAX_CHART_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|_| missing())?;
    if bytes.len() as u64 > MAX_CHART_BYTES {
        return Err(ApiError::Internal(format!(
            "{} is larger than {} MiB: not a chart of the trace bench",
            path.display(),
            MAX_CHART_BYTES >> 20
        )));
    }
    let mut resp = bytes.into_response();
    let h = resp.headers_mut();
    // Shown as an image, an SVG runs nothing; opened on its own, the
    // policy keeps it so.
    crate::console::locked_down(
        h,
        "image/svg+xml",
        "default-src 'none'; style-src 'unsafe-inline'",
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}
