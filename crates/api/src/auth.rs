//! Who may call what: bearer tokens with a scope, checked for every `/v1`
//! route, and the `Host` guard of a node that has no token.
//!
//! A token has one of three scopes, each including the ones below it:
//! - [`Scope::Read`]: `GET` and `HEAD` under `/v1` outside `/v1/cluster/`,
//!   and `GET /v1/cluster`; signing secrets are left out of what it reads.
//! - [`Scope::Api`]: what a producer does: events, endpoints, deliveries,
//!   sources (every method under `/v1` outside `/v1/cluster/`).
//! - [`Scope::Admin`]: everything, `/v1/cluster/...` included (shard moves,
//!   drains, membership, payload keys).
//!
//! Tokens come from `--api-token`, `--admin-token`, `--read-token` and a
//! tokens file of named ones ([`parse_tokens_file`]), which the node reads
//! again on `SIGHUP`, so one service's token is revoked without a restart.
//! Only SHA-256 digests are held; a presented token is hashed and compared
//! with every digest in constant time.
//!
//! With no token at all (a node on a loopback address, for development)
//! every route but membership is open, and only requests whose `Host` names
//! a loopback address are answered ([`host_is_loopback`]), so a web page
//! cannot reach the node through DNS rebinding. Membership changes always
//! need an admin token: the admin scope is never the API token by default.

use std::fmt;
use std::sync::{Arc, RwLock};

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hookraft_core::redact::{SecretString, TOKEN_CHARS_MIN};
use sha2::{Digest, Sha256};

use crate::context::ApiContext;
use crate::problem::Problem;

/// What a token may do; each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Read,
    Api,
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Api => "api",
            Self::Admin => "admin",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "api" => Some(Self::Api),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One accepted token: its name (for logs and problems), scope and digest.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub name: String,
    pub scope: Scope,
    digest: [u8; 32],
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential").field("name", &self.name).field("scope", &self.scope).finish_non_exhaustive()
    }
}

impl Credential {
    /// A credential for `token`, refused when the token is too weak.
    pub fn new(name: &str, scope: Scope, token: &SecretString) -> Result<Self, String> {
        token.check_strength(&format!("the token `{name}`"), TOKEN_CHARS_MIN)?;
        Ok(Self { name: name.to_owned(), scope, digest: digest(token.expose()) })
    }

    /// A credential known by its digest only (`sha256:<hex>` in a tokens file).
    fn from_digest(name: &str, scope: Scope, hex: &str) -> Result<Self, String> {
        let bytes = decode_hex(hex).filter(|b| b.len() == 32).ok_or_else(|| {
            format!("the token `{name}`: `sha256:` must be followed by 64 hex digits (`sha256sum` of the token)")
        })?;
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes);
        Ok(Self { name: name.to_owned(), scope, digest })
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Most named tokens a file may hold: each request is compared with all.
pub const TOKENS_MAX: usize = 1_000;

/// Parses a tokens file: one token a line, `<name> <scope> <token>`, where
/// the token is the text itself or `sha256:<64 hex digits>` of it; blank
/// lines and lines starting with `#` are skipped. Names are unique
/// (letters, digits, `-`, `_`, `.`). Errors name the line, never a token.
pub fn parse_tokens_file(text: &str) -> Result<Vec<Credential>, String> {
    let mut credentials: Vec<Credential> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: String| format!("line {}: {why}", index + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, scope, token] = fields[..] else {
            return Err(at("expected `<name> <scope> <token>`".into()));
        };
        if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(at("a name is 1 to 64 letters, digits, `-`, `_` or `.`".into()));
        }
        let scope = Scope::parse(scope).ok_or_else(|| at(format!("scope `{scope}` is none of read, api, admin")))?;
        let credential = match token.strip_prefix("sha256:") {
            Some(hex) => Credential::from_digest(name, scope, hex),
            None => Credential::new(name, scope, &SecretString::new(token)),
        }
        .map_err(at)?;
        if credentials.iter().any(|c| c.name == credential.name) {
            return Err(at(format!("the name `{name}` is used twice")));
        }
        if credentials.iter().any(|c| c.digest == credential.digest) {
            return Err(at(format!("`{name}` has the same token as another line")));
        }
        credentials.push(credential);
        if credentials.len() > TOKENS_MAX {
            return Err(at(format!("more than {TOKENS_MAX} tokens")));
        }
    }
    Ok(credentials)
}

/// The tokens a node accepts: those of its flags, fixed, and those of its
/// tokens file, replaced on each reload.
#[derive(Debug, Default)]
pub struct Tokens {
    fixed: Vec<Credential>,
    from_file: RwLock<Arc<Vec<Credential>>>,
}

impl Tokens {
    /// The tokens of `--api-token`, `--admin-token` and `--read-token`.
    pub fn new(fixed: Vec<Credential>) -> Self {
        Self { fixed, from_file: RwLock::default() }
    }

    /// Replaces the tokens of the file; returns how many there are now.
    pub fn replace_file_tokens(&self, credentials: Vec<Credential>) -> usize {
        let count = credentials.len();
        *self.from_file.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(credentials);
        count
    }

    fn file_tokens(&self) -> Arc<Vec<Credential>> {
        self.from_file.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether any token is configured: without one the node is open (on
    /// loopback only).
    pub fn any(&self) -> bool {
        !self.fixed.is_empty() || !self.file_tokens().is_empty()
    }

    /// Whether an admin token is configured.
    pub fn has_admin(&self) -> bool {
        self.fixed.iter().chain(self.file_tokens().iter()).any(|c| c.scope == Scope::Admin)
    }

    /// The credential `token` is, compared with every one in constant time.
    pub fn check(&self, token: &str) -> Option<Credential> {
        use subtle::ConstantTimeEq;
        let presented = digest(token);
        let file = self.file_tokens();
        let mut found = None;
        for credential in self.fixed.iter().chain(file.iter()) {
            if bool::from(credential.digest.ct_eq(&presented)) {
                found = Some(credential.clone());
            }
        }
        found
    }
}

/// The scope a request needs: admin under `/v1/cluster/`, read for `GET`
/// and `HEAD` elsewhere, api for every other method.
pub fn required_scope(method: &Method, path: &str) -> Scope {
    if path.starts_with("/v1/cluster/") {
        Scope::Admin
    } else if method == Method::GET || method == Method::HEAD {
        Scope::Read
    } else {
        Scope::Api
    }
}

/// Membership changes, which need an admin token even on a node without
/// any token.
fn is_membership_change(method: &Method, path: &str) -> bool {
    method != Method::GET
        && method != Method::HEAD
        && path.starts_with("/v1/cluster/nodes")
        && !path.ends_with("/drain")
}

/// What to set to get an admin token.
const SET_ADMIN_TOKEN: &str = "start the node with --admin-token (HOOKRAFT_ADMIN_TOKEN) or an `admin` line in \
     --tokens-file, the same on every node, and send it as `Authorization: Bearer <token>`";

/// The caller a request was authenticated as, in its extensions; absent on
/// a node without tokens.
#[derive(Debug, Clone)]
pub struct Caller(pub Credential);

/// Whether a request's caller may see signing secrets: only callers of the
/// api scope or above, or anyone on a node without tokens.
pub fn may_see_secrets(caller: Option<&Caller>) -> bool {
    caller.is_none_or(|Caller(c)| c.scope >= Scope::Api)
}

/// The token of an `Authorization: Bearer <token>` header, trimmed.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).map(str::trim)
}

/// Lets a `/v1` request through when its bearer token has the scope the
/// route needs (401 without a known token, 403 with too narrow a one).
pub async fn require_token(State(ctx): State<Arc<ApiContext>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let method = request.method().clone();
    let needed = required_scope(&method, path);
    if !ctx.tokens.any() {
        if is_membership_change(&method, path) {
            return Problem::forbidden(format!("membership changes need an admin token: {SET_ADMIN_TOKEN}"))
                .into_response();
        }
        return next.run(request).await;
    }
    let Some(credential) = bearer_token(request.headers()).and_then(|token| ctx.tokens.check(token)) else {
        return Problem::unauthorized().into_response();
    };
    if credential.scope < needed {
        let also = if needed == Scope::Admin && !ctx.tokens.has_admin() {
            format!("; this node has no admin token: {SET_ADMIN_TOKEN}")
        } else {
            String::new()
        };
        return Problem::forbidden(format!(
            "the token `{}` has the {} scope; {method} {path} needs {needed}{also}",
            credential.name, credential.scope
        ))
        .into_response();
    }
    request.extensions_mut().insert(Caller(credential));
    next.run(request).await
}

/// Whether a `Host` header (or URI authority) names a loopback address:
/// `localhost`, a name under `.localhost`, `127.0.0.0/8` or `[::1]`, with
/// or without a port.
pub fn host_is_loopback(host: &str) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inside, port)) if port.is_empty() || port.starts_with(':') => inside.to_owned(),
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name.to_owned(),
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.trim_end_matches('.');
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// On a node without tokens, answers only requests addressed to a loopback
/// host (403 otherwise); a request that names no host at all (HTTP/1.0)
/// was not sent by a browser and passes.
pub async fn require_loopback_host(State(ctx): State<Arc<ApiContext>>, request: Request, next: Next) -> Response {
    if ctx.tokens.any() {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    match host {
        Some(host) if !host_is_loopback(&host) => Problem::forbidden(
            "this node has no API token, so it answers only requests addressed to a loopback host \
             (localhost, 127.0.0.1, [::1]); start it with --api-token to serve other names",
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> SecretString {
        SecretString::new(text)
    }

    #[test]
    fn a_token_is_found_by_its_text_and_carries_its_name_and_scope() {
        let tokens = Tokens::new(vec![
            Credential::new("api-token", Scope::Api, &token("producer-token-0123456")).unwrap(),
            Credential::new("admin-token", Scope::Admin, &token("operator-token-6543210")).unwrap(),
        ]);
        assert_eq!(tokens.check("producer-token-0123456").map(|c| c.scope), Some(Scope::Api));
        assert_eq!(tokens.check("operator-token-6543210").map(|c| c.name), Some("admin-token".into()));
        assert!(tokens.check("producer-token-0123457").is_none());
        assert!(tokens.check("").is_none());
        assert!(tokens.has_admin());
    }

    #[test]
    fn the_tokens_file_names_scopes_and_takes_digests() {
        let text = "# services\n\
                    billing api billing-service-token-7f3a\n\
                    \n\
                    ops admin sha256:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9\n\
                    grafana read grafana-readonly-token-91\n";
        let credentials = parse_tokens_file(text).unwrap();
        let tokens = Tokens::new(Vec::new());
        assert!(!tokens.any());
        tokens.replace_file_tokens(credentials);
        assert_eq!(tokens.check("billing-service-token-7f3a").map(|c| c.scope), Some(Scope::Api));
        assert_eq!(tokens.check("grafana-readonly-token-91").map(|c| c.scope), Some(Scope::Read));
        // The digest line: sha256("hello world").
        assert_eq!(tokens.check("hello world").map(|c| (c.name, c.scope)), Some(("ops".into(), Scope::Admin)));
        // A reload replaces the file's tokens: the billing token is revoked.
        tokens.replace_file_tokens(parse_tokens_file("grafana read grafana-readonly-token-91\n").unwrap());
        assert!(tokens.check("billing-service-token-7f3a").is_none());
        assert!(!tokens.has_admin());
    }

    #[test]
    fn a_bad_tokens_file_is_refused_with_the_line_and_without_the_token() {
        let cases = [
            ("billing api", "line 1: expected"),
            ("billing owner billing-service-token-7f3a", "scope `owner`"),
            ("billing api short", "fewer than the 16"),
            ("bil/ling api billing-service-token-7f3a", "a name is"),
            (
                "a api billing-service-token-7f3a\na read billing-service-token-7f3b",
                "line 2: the name `a` is used twice",
            ),
            ("a api billing-service-token-7f3a\nb read billing-service-token-7f3a", "same token"),
            ("a api sha256:abcd", "64 hex digits"),
        ];
        for (text, expected) in cases {
            let error = parse_tokens_file(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains("billing-service-token-7f3"), "the error quotes a token: {error}");
        }
    }

    #[test]
    fn routes_need_the_scope_of_what_they_do() {
        assert_eq!(required_scope(&Method::GET, "/v1/endpoints"), Scope::Read);
        assert_eq!(required_scope(&Method::GET, "/v1/cluster"), Scope::Read);
        assert_eq!(required_scope(&Method::POST, "/v1/events"), Scope::Api);
        assert_eq!(required_scope(&Method::DELETE, "/v1/endpoints/ep_1"), Scope::Api);
        assert_eq!(required_scope(&Method::GET, "/v1/cluster/payloads/keys"), Scope::Admin);
        assert_eq!(required_scope(&Method::POST, "/v1/cluster/nodes"), Scope::Admin);
        assert!(is_membership_change(&Method::POST, "/v1/cluster/nodes"));
        assert!(is_membership_change(&Method::DELETE, "/v1/cluster/nodes/3"));
        assert!(!is_membership_change(&Method::POST, "/v1/cluster/nodes/3/drain"));
        assert!(!is_membership_change(&Method::POST, "/v1/cluster/shards/3/move"));
    }

    #[test]
    fn loopback_hosts_are_told_from_other_names() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "[::1]",
            "app.localhost",
            "LOCALHOST.",
        ] {
            assert!(host_is_loopback(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1:8080",
            "127.0.0.1.evil.example",
            "[::1]x",
            "localhost:80a",
            "[fe80::1]:80",
            "0.0.0.0",
        ] {
            assert!(!host_is_loopback(host), "{host}");
        }
    }

    #[test]
    fn secrets_are_shown_to_producers_and_not_to_readers() {
        let read = Credential::new("grafana", Scope::Read, &token("grafana-readonly-token-91")).unwrap();
        let api = Credential::new("billing", Scope::Api, &token("billing-service-token-7f3a")).unwrap();
        assert!(!may_see_secrets(Some(&Caller(read))));
        assert!(may_see_secrets(Some(&Caller(api))));
        assert!(may_see_secrets(None));
    }

    #[test]
    fn debug_shows_no_digest() {
        let credential = Credential::new("billing", Scope::Api, &token("billing-service-token-7f3a")).unwrap();
        let text = format!("{credential:?}");
        assert!(text.contains("billing") && !text.contains("digest"), "{text}");
    }
}
