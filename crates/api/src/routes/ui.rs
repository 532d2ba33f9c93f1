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

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::context::ApiContext;
use crate::openapi::problems::NotFound;
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

/// The dashboard's routes. There is no catch-all `/ui/{*path}`: OpenAPI
/// has no path parameter that spans segments, so the files are served at
/// `/ui/{file}`, one segment, exactly as the document says; a deeper path
/// (`/ui/app.js/x`) matches no route, and the router's fallback answers it
/// with [`no_file`], as an unknown file is answered here.
pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(root)).routes(routes!(page)).routes(routes!(page_slash)).routes(routes!(file))
}

/// The node's address leads to the dashboard.
#[utoipa::path(
    get,
    path = "/",
    tag = "dashboard",
    responses((status = 303, description = "To the dashboard.", headers(("Location" = String, description = "`/ui`"))))
)]
async fn root() -> Redirect {
    Redirect::to(UI_PATH)
}

/// The operator dashboard: a page that asks for the operator's token and
/// renders everything from `/v1` in the browser. It holds no data, so it
/// needs no token.
#[utoipa::path(
    get,
    path = "/ui",
    tag = "dashboard",
    params(("If-None-Match" = Option<String>, Header, description = "ETags the browser holds.")),
    responses(
        (status = 200, description = "The page, with a Content-Security-Policy that allows this origin only.",
            body = String, content_type = "text/html", headers(("ETag" = String, description = "A hash of the body."),
                ("Content-Security-Policy" = String))),
        (status = 304, description = "The browser holds this version (`If-None-Match`).", headers(("ETag" = String))),
    )
)]
async fn page(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

/// `/ui/` is the dashboard too.
#[utoipa::path(
    get,
    path = "/ui/",
    tag = "dashboard",
    responses((status = 303, description = "To the dashboard.", headers(("Location" = String, description = "`/ui`"))))
)]
async fn page_slash() -> Redirect {
    Redirect::to(UI_PATH)
}

/// A file the dashboard's page loads: its scripts, stylesheet and icon,
/// embedded in the binary. No token: they hold no data.
#[utoipa::path(
    get,
    path = "/ui/{file}",
    tag = "dashboard",
    params(
        ("file" = AssetName, Path),
        ("If-None-Match" = Option<String>, Header, description = "ETags the browser holds."),
    ),
    responses(
        (status = 200, description = "The file, by its kind; with the dashboard's Content-Security-Policy.",
            content((String = "text/javascript"), (String = "text/css"), (String = "image/svg+xml")),
            headers(("ETag" = String, description = "A hash of the body."),
                ("Content-Security-Policy" = String))),
        (status = 304, description = "The browser holds this version (`If-None-Match`).", headers(("ETag" = String))),
        (status = 404, response = NotFound),
    )
)]
async fn file(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match find(&file) {
        Some(asset) => serve(asset, &headers),
        None => no_file(&file),
    }
}

/// The answer for a path under `/ui/` that names no embedded file: a 404
/// problem, with the dashboard's headers like every answer under `/ui`.
pub fn no_file(path: &str) -> Response {
    secured(Problem::not_found(format!("no file {UI_PATH}/{path}; the dashboard is at {UI_PATH}")))
}

/// The name of an embedded file under `/ui/`, for the document: the
/// paths of [`ASSETS`], so the document lists the files a node serves.
pub struct AssetName;

impl utoipa::PartialSchema for AssetName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(ASSETS.iter().map(|a| a.path)))
            .description(Some("A file of the dashboard, as its page names it."))
            .into()
    }
}

impl utoipa::ToSchema for AssetName {}

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
