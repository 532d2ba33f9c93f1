//! The operator dashboard: `GET /ui` and the files under it, embedded in
//! the binary (`crates/api/ui/`), and `GET /` redirecting there.
//!
//! The files are static and hold no data, so they need no token: the
//! page asks for the operator's token, keeps it in the browser's session
//! storage, and renders everything from the public `/v1` API with it (see
//! docs/DESIGN-NOTES.md on why there is no server-side template). Every
//! answer carries a Content-Security-Policy that allows scripts, styles
//! and requests from this origin only, with no inline script and no
//! framing, and `Cache-Control: no-cache` with an `ETag`, so a browser
//! revalidates and an upgraded node's files are never mixed with an old
//! node's.

use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::context::ApiContext;
use crate::problem::Problem;

/// Where the dashboard lives.
pub const UI_PATH: &str = "/ui";

/// What a page of the dashboard may load and do: its own origin's scripts,
/// styles, images and API only; no inline script or style, no plugin, no
/// `<base>`, forms posted to itself, never shown in a frame.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// One embedded file.
pub struct Asset {
    /// Its path under `/ui/`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
    /// The `ETag` value, quoted: a hash of the body, fixed at build time.
    pub etag: &'static str,
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {{
        const BODY: &str = include_str!(concat!("../../ui/", $path));
        const TAG: [u8; 18] = etag_of(BODY.as_bytes());
        Asset {
            path: $path,
            content_type: $content_type,
            body: BODY,
            etag: match std::str::from_utf8(&TAG) {
                Ok(tag) => tag,
                Err(_) => panic!("an ETag is ASCII"),
            },
        }
    }};
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// The page itself (served at `/ui`) and every file it loads.
pub static INDEX: Asset = asset!("index.html", HTML);
pub static ASSETS: &[Asset] = &[
    asset!("app.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("chart.js", JS),
    asset!("page-overview.js", JS),
    asset!("page-endpoints.js", JS),
    asset!("page-deliveries.js", JS),
    asset!("page-delivery.js", JS),
    asset!("page-event.js", JS),
    asset!("page-cluster.js", JS),
    asset!("favicon.svg", SVG),
];

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new()
        .route("/", get(|| async { Redirect::to(UI_PATH) }))
        .route(UI_PATH, get(|headers: HeaderMap| async move { serve(&INDEX, &headers) }))
        .route("/ui/", get(|| async { Redirect::to(UI_PATH) }))
        .route("/ui/{*path}", get(file))
}

async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match find(&path) {
        Some(asset) => serve(asset, &headers),
        None => secured(Problem::not_found(format!("no file {UI_PATH}/{path}; the dashboard is at {UI_PATH}"))),
    }
}

/// The embedded file at `path` (under `/ui/`), if any.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// The file, or `304 Not Modified` when the browser holds this version.
fn serve(asset: &'static Asset, request: &HeaderMap) -> Response {
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == asset.etag || t.trim() == "*"));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    secured(response)
}

/// Adds the dashboard's security and cache headers to any answer under `/ui`.
fn secured(response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `"` + 16 hex digits of FNV-1a 64 over `bytes` + `"`: a strong ETag
/// computed at build time.
const fn etag_of(bytes: &[u8]) -> [u8; 18] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    let digits = b"0123456789abcdef";
    let mut tag = [b'"'; 18];
    let mut d = 0;
    while d < 16 {
        tag[1 + d] = digits[((hash >> (60 - 4 * d)) & 0xf) as usize];
        d += 1;
    }
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_names_is_embedded_and_nothing_else_is() {
        let page = INDEX.body;
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".css") || a.path == "app.js" || a.path == "favicon.svg")
        {
            assert!(page.contains(&format!("/ui/{}", asset.path)), "index.html loads {}", asset.path);
        }
        // Every module an embedded script imports is embedded.
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            for line in asset.body.lines().filter(|l| l.starts_with("import ")) {
                let name = line.rsplit("'./").next().and_then(|rest| rest.split('\'').next()).unwrap_or_default();
                assert!(find(name).is_some(), "{} imports {name:?}, which is not embedded", asset.path);
            }
        }
        assert!(find("../Cargo.toml").is_none() && find("").is_none() && find("index.html").is_none());
    }

    /// Whether `html` has an attribute such as ` onclick=`: a handler the
    /// CSP would refuse to run anyway.
    fn has_inline_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(at, _)| {
            let name: String = html[at + 3..].chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && html[at + 3 + name.len()..].starts_with('=')
        })
    }

    #[test]
    fn no_page_runs_inline_script_or_style() {
        assert!(has_inline_handler("<a onclick=\"x\">") && !has_inline_handler("<p>go on=now</p>"));
        let page = INDEX.body;
        assert!(
            page.match_indices("<script")
                .all(|(at, _)| page[at..].split('>').next().is_some_and(|t| t.contains(" src=")))
        );
        assert!(!page.contains(" style=") && !page.contains("<style") && !has_inline_handler(page));
        // Data reaches the page as text, never as markup.
        for asset in ASSETS.iter().filter(|a| a.content_type == JS) {
            for forbidden in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
                assert!(!asset.body.contains(forbidden), "{} uses {forbidden}", asset.path);
            }
        }
    }

    #[test]
    fn etags_differ_with_the_content_and_are_quoted_hex() {
        let a = etag_of(b"a");
        assert_ne!(a, etag_of(b"b"));
        assert_eq!((a[0], a[17]), (b'"', b'"'));
        assert!(a[1..17].iter().all(u8::is_ascii_hexdigit));
        let tags: std::collections::BTreeSet<&str> = ASSETS.iter().map(|a| a.etag).collect();
        assert_eq!(tags.len(), ASSETS.len(), "distinct files, distinct tags");
    }
}
