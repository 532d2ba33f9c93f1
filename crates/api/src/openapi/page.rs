//! `GET /docs`: a reference page rendered from the OpenAPI document on the
//! server, as plain HTML and one inline stylesheet. No script, nothing
//! fetched: it reads the same in a terminal browser, and the page's
//! Content-Security-Policy allows only its own stylesheet (by hash).
//!
//! [`render`] is a pure function of the document's JSON; every text taken
//! from it is escaped.

use std::fmt::Write;

use serde_json::Value;

/// The page's only style.
pub const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:0 1rem;color:#1b1b1b}\
code{font:13px ui-monospace,monospace;background:#f3f3f3;padding:0 .2em}\
table{border-collapse:collapse;margin:.4rem 0 1rem;width:100%}\
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}\
th{background:#f7f7f7}article{border-top:1px solid #ccc;padding:.5rem 0}\
.m{display:inline-block;min-width:4.5rem;font-weight:700}.d{color:#555}";

/// Allows nothing but [`STYLE`]; a test holds the hash to it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
    style-src 'sha256-v5sPZfS7n+eUhIaHb5utl2pOtrK+8vtkXXbxGz1v0Ic='; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const METHODS: [&str; 8] = ["get", "put", "post", "patch", "delete", "head", "options", "trace"];

/// The page for `doc`, an OpenAPI document.
pub fn render(doc: &Value) -> String {
    let mut out = String::with_capacity(256 * 1024);
    let title = text(&doc["info"]["title"]);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head><body><header><h1>{title} <small>{}</small></h1>\
         <p>{}</p><p>The OpenAPI {} document: <a href=\"/openapi.json\"><code>/openapi.json</code></a>.</p></header>",
        text(&doc["info"]["version"]),
        text(&doc["info"]["description"]),
        text(&doc["openapi"]),
    );
    let tags = tags_of(doc);
    out.push_str("<nav><h2>Contents</h2>");
    for (tag, _) in &tags {
        let _ = write!(out, "<h3><a href=\"#tag-{0}\">{0}</a></h3><ul>", esc(tag));
        for (method, path, op) in operations(doc, tag) {
            let _ = write!(
                out,
                "<li><a href=\"#{}\"><code>{} {}</code></a> {}</li>",
                anchor(method, path),
                method.to_uppercase(),
                esc(path),
                text(&op["summary"])
            );
        }
        out.push_str("</ul>");
    }
    out.push_str(
        "<p><a href=\"#responses\">Problem responses</a> · <a href=\"#schemas\">Schemas</a> · \
                  <a href=\"#security\">Credentials</a></p></nav><main>",
    );
    for (tag, description) in &tags {
        let _ = write!(out, "<section><h2 id=\"tag-{0}\">{0}</h2><p>{1}</p>", esc(tag), code_spans(&esc(description)));
        for (method, path, op) in operations(doc, tag) {
            operation(&mut out, method, path, op);
        }
        out.push_str("</section>");
    }
    out.push_str("<section><h2 id=\"responses\">Problem responses</h2>");
    for (name, response) in entries(&doc["components"]["responses"]) {
        let _ = write!(out, "<h3 id=\"response-{0}\">{0}</h3><p>{1}</p>", esc(name), text(&response["description"]));
        if let Some(headers) = response["headers"].as_object() {
            for (header, value) in headers {
                let _ = write!(out, "<p>Header <code>{}</code>: {}</p>", esc(header), text(&value["description"]));
            }
        }
    }
    out.push_str("</section><section><h2 id=\"schemas\">Schemas</h2>");
    for (name, schema) in entries(&doc["components"]["schemas"]) {
        let _ = write!(out, "<h3 id=\"schema-{0}\">{0}</h3>", esc(name));
        schema_block(&mut out, schema, 0);
    }
    out.push_str("</section><section><h2 id=\"security\">Credentials</h2><table><tr><th>name</th><th>kind</th><th>meaning</th></tr>");
    for (name, scheme) in entries(&doc["components"]["securitySchemes"]) {
        let kind = match scheme["type"].as_str() {
            Some("http") => format!("HTTP {}", text(&scheme["scheme"])),
            Some("apiKey") => format!("header <code>{}</code>", text(&scheme["name"])),
            _ => text(&scheme["type"]),
        };
        let _ = write!(out, "<tr><td>{}</td><td>{kind}</td><td>{}</td></tr>", esc(name), text(&scheme["description"]));
    }
    out.push_str("</table></section></main></body></html>\n");
    out
}

/// The document's tags, in its order, then any an operation names that it does not list.
fn tags_of(doc: &Value) -> Vec<(String, String)> {
    let mut tags: Vec<(String, String)> = doc["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_string(),
                t["description"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (_, _, op) in all_operations(doc) {
        let tag = op["tags"][0].as_str().unwrap_or("other");
        if !tags.iter().any(|(name, _)| name == tag) {
            tags.push((tag.to_string(), String::new()));
        }
    }
    tags
}

fn all_operations(doc: &Value) -> impl Iterator<Item = (&'static str, &str, &Value)> {
    entries(&doc["paths"])
        .flat_map(|(path, item)| METHODS.iter().filter_map(move |m| item.get(*m).map(|op| (*m, path.as_str(), op))))
}

fn operations<'a>(doc: &'a Value, tag: &'a str) -> impl Iterator<Item = (&'static str, &'a str, &'a Value)> {
    all_operations(doc).filter(move |(_, _, op)| op["tags"][0].as_str().unwrap_or("other") == tag)
}

fn operation(out: &mut String, method: &str, path: &str, op: &Value) {
    let _ = write!(
        out,
        "<article id=\"{}\"><h3><span class=\"m\">{}</span><code>{}</code></h3><p>{}</p>",
        anchor(method, path),
        method.to_uppercase(),
        esc(path),
        text(&op["summary"])
    );
    if let Some(description) = op["description"].as_str() {
        let _ = write!(out, "<p class=\"d\">{}</p>", code_spans(&esc(description)));
    }
    let credential = op["security"][0].as_object().and_then(|s| s.keys().next());
    match credential {
        Some(name) => {
            let _ = write!(out, "<p>Credential: <a href=\"#security\">{}</a></p>", esc(name));
        }
        None => out.push_str("<p>Credential: none</p>"),
    }
    if let Some(parameters) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
        out.push_str("<table><tr><th>parameter</th><th>in</th><th>type</th><th>required</th><th>meaning</th></tr>");
        for p in parameters {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(&p["name"]),
                text(&p["in"]),
                type_of(&p["schema"]),
                if p["required"].as_bool() == Some(true) { "yes" } else { "no" },
                text(&p["description"])
            );
        }
        out.push_str("</table>");
    }
    if let Some(content) = op["requestBody"]["content"].as_object() {
        let required = if op["requestBody"]["required"].as_bool() == Some(true) { "required" } else { "optional" };
        let _ = write!(out, "<p>Body ({required}) {}</p>", text(&op["requestBody"]["description"]));
        for (media, body) in content {
            let _ = write!(out, "<p><code>{}</code>: {}</p>", esc(media), type_of(&body["schema"]));
        }
    }
    out.push_str("<table><tr><th>status</th><th>answer</th><th>body</th></tr>");
    for (status, response) in entries(&op["responses"]) {
        let (description, body) = match response["$ref"].as_str() {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap_or_default();
                (
                    format!("<a href=\"#response-{0}\">{0}</a>", esc(name)),
                    "<code>application/problem+json</code>".to_string(),
                )
            }
            None => {
                let body: Vec<String> = entries(&response["content"])
                    .map(|(media, c)| format!("<code>{}</code> {}", esc(media), type_of(&c["schema"])))
                    .collect();
                (text(&response["description"]), body.join("<br>"))
            }
        };
        let _ = write!(out, "<tr><td>{}</td><td>{description}</td><td>{body}</td></tr>", esc(status));
    }
    out.push_str("</table></article>");
}

/// A schema's description and fields (or variants), nested inline objects included.
fn schema_block(out: &mut String, schema: &Value, depth: usize) {
    if schema["description"].is_string() {
        let _ = write!(out, "<p>{}</p>", text(&schema["description"]));
    }
    let variants = schema["oneOf"].as_array().or_else(|| schema["allOf"].as_array());
    if let (Some(variants), true) = (variants, depth < 3) {
        let joiner = if schema["oneOf"].is_array() { "One of:" } else { "All of:" };
        let _ = write!(out, "<p>{joiner}</p><ul>");
        for variant in variants {
            out.push_str("<li>");
            if variant["properties"].is_object() {
                schema_block(out, variant, depth + 1);
            } else {
                out.push_str(&type_of(variant));
            }
            out.push_str("</li>");
        }
        out.push_str("</ul>");
    }
    let Some(properties) = schema["properties"].as_object() else {
        if variants.is_none() {
            let _ = write!(out, "<p>{}</p>", type_of(schema));
        }
        return;
    };
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    out.push_str("<table><tr><th>field</th><th>type</th><th>required</th><th>meaning</th></tr>");
    for (name, property) in properties {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}",
            esc(name),
            type_of(property),
            if required.contains(&name.as_str()) { "yes" } else { "no" },
            text(&property["description"])
        );
        if property["properties"].is_object() && depth < 3 {
            schema_block(out, property, depth + 1);
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</table>");
}

/// A schema's type in a few words, with links to named schemas.
fn type_of(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or_default();
        return format!("<a href=\"#schema-{0}\">{0}</a>", esc(name));
    }
    for (key, word) in [("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")] {
        if let Some(variants) = schema[key].as_array() {
            return variants.iter().map(type_of).collect::<Vec<_>>().join(word);
        }
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("<code>{}</code>", esc(&v.to_string()))).collect();
        return format!("one of {}", values.join(", "));
    }
    if let Some(value) = schema.get("const") {
        return format!("<code>{}</code>", esc(&value.to_string()));
    }
    let types: Vec<String> = match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => vec![],
    };
    if types.is_empty() {
        return "any JSON".to_string();
    }
    let rendered: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "array" => format!("array of {}", type_of(&schema["items"])),
            "object" if schema["additionalProperties"].is_object() => {
                format!("map of {}", type_of(&schema["additionalProperties"]))
            }
            "null" => "null".to_string(),
            other => match schema["format"].as_str() {
                Some(format) => format!("{} ({})", esc(other), esc(format)),
                None => esc(other),
            },
        })
        .collect();
    let mut out = rendered.join(" | ");
    for (key, word) in [("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤")]
    {
        if let Some(bound) = schema[key].as_f64() {
            let _ = write!(out, ", {word} {bound}");
        }
    }
    out
}

fn entries(value: &Value) -> impl Iterator<Item = (&String, &Value)> {
    value.as_object().into_iter().flatten()
}

fn anchor(method: &str, path: &str) -> String {
    let slug: String = path.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("op-{method}{slug}")
}

/// A string of the document, escaped, its `code spans` as code; empty
/// for anything else.
fn text(value: &Value) -> String {
    value.as_str().map(|t| code_spans(&esc(t))).unwrap_or_default()
}

/// Escaped text with each pair of backticks around a `<code>` span; text
/// with an odd number of backticks stays as it is.
fn code_spans(escaped: &str) -> String {
    let parts: Vec<&str> = escaped.split('`').collect();
    if parts.len().is_multiple_of(2) {
        return escaped.to_string();
    }
    let mut out = String::with_capacity(escaped.len() + 16);
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// Escapes text for HTML content and quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn the_policy_allows_exactly_the_pages_stylesheet() {
        let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
        assert!(CONTENT_SECURITY_POLICY.contains(&format!("'sha256-{hash}'")), "style hash is {hash}");
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'none'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("script-src"), "no script is allowed (default-src 'none')");
    }

    #[test]
    fn text_from_the_document_is_escaped() {
        let doc = serde_json::json!({
            "openapi": "3.1.0",
            "info": {"title": "<script>alert(1)</script>", "version": "1", "description": "a & b"},
            "paths": {"/x/{id}": {"get": {"tags": ["t\"><b>"], "summary": "<img src=x>",
                "responses": {"200": {"description": "ok"}}}}},
        });
        let page = render(&doc);
        assert!(!page.contains("<script>") && !page.contains("<img") && !page.contains("\"><b>"), "{page}");
        assert!(page.contains("&lt;script&gt;") && page.contains("a &amp; b"), "{page}");
        assert!(page.contains("<code>GET /x/{id}</code>"), "{page}");
    }

    #[test]
    fn backticks_mark_code_in_pairs_only() {
        assert_eq!(code_spans("a `b` c `d`"), "a <code>b</code> c <code>d</code>");
        assert_eq!(code_spans("one ` alone"), "one ` alone");
        assert_eq!(code_spans(&esc("`<x>`")), "<code>&lt;x&gt;</code>");
    }
}
