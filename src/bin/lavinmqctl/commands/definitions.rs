//! Definition commands: export (all, or one vhost with -p) and import from a
//! file or standard input, and the export of a data dir without a broker.

use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use hyper::Method;

use super::Ctx;
use crate::api::{parse_json, path};
use crate::error::{CtlError, CtlResult};

/// Where definitions are read and written: the broker's, or one vhost's.
fn endpoint(ctx: &Ctx) -> String {
    match &ctx.vhost_option {
        Some(vhost) => path(["definitions", vhost]),
        None => "/api/definitions".to_string(),
    }
}

/// `export_definitions`: prints the definitions as JSON.
pub async fn export(ctx: &Ctx) -> CtlResult<()> {
    let target = endpoint(ctx);
    let resp = ctx.api.call(Method::GET, &target, None, &[200]).await?;
    ctx.out.document(&parse_json(&target, &resp.body)?)
}

/// `import_definitions <file>` (`-` reads standard input). The file must be
/// JSON; the broker checks the rest and its reason is shown on failure.
pub async fn import(ctx: &Ctx, file: &Path) -> CtlResult<()> {
    let read_error = |source| CtlError::File {
        path: file.to_path_buf(),
        source,
    };
    let body = if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(read_error)?;
        buf
    } else {
        std::fs::read(file).map_err(read_error)?
    };
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&body) {
        return Err(CtlError::Usage(format!("{} is not valid JSON: {e}", file.display())));
    }
    ctx.api
        .call_raw(
            Method::POST,
            &endpoint(ctx),
            Some(Bytes::from(body)),
            &[],
            &[200, 201, 204],
        )
        .await?;
    Ok(())
}

/// `definitions <datadir>`: prints the definitions stored in a data dir (this
/// broker's, or LavinMQ's) as JSON, read from its files without a broker (the
/// dir is not written; a broker running on it is refused).
pub fn from_data_dir(ctx: &Ctx, data_dir: &Path) -> CtlResult<()> {
    let definitions = if lavinmq::takeover::needs_take_over(data_dir) {
        // A LavinMQ data dir, as LavinMQ's own command reads it.
        lavinmq::takeover::lavinmq_definitions(data_dir)?
    } else {
        lavinmq::core::definitions_offline::export_data_dir(data_dir)?
    };
    ctx.out.document(&definitions)
}
