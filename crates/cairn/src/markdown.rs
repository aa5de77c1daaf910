//! Markdown to HTML for the web app's Docs page (CommonMark with tables, strikethrough and task
//! lists). The output is safe to put in a page: raw HTML in the markdown is shown as text, a
//! link keeps only an http, https or mailto address (or one within the page), and an image
//! becomes a link to it (the page loads nothing from elsewhere).

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

/// A link target the page may follow: http(s), mailto, or relative to this page.
fn safe_url(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        // A colon after a slash, `?` or `#` is not a scheme.
        Some((scheme, _)) if !scheme.contains(['/', '?', '#']) => {
            matches!(scheme, "http" | "https" | "mailto")
        }
        _ => true,
    }
}

pub fn to_html(text: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(text, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
            let dest_url = if safe_url(&dest_url) { dest_url } else { CowStr::Borrowed("#") };
            Event::Start(Tag::Link { link_type, dest_url, title, id })
        }
        Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
            let dest_url = if safe_url(&dest_url) { dest_url } else { CowStr::Borrowed("#") };
            Event::Start(Tag::Link { link_type, dest_url, title, id })
        }
        Event::End(TagEnd::Image) => Event::End(TagEnd::Link),
        other => other,
    });
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    html::push_html(&mut out, events);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_renders_and_raw_html_is_text() {
        let out = to_html(
            "# Title\n\nSome *words* and `code`.\n\n```python\nx = 1 < 2\n```\n\n<script>alert(1)</script>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
        );
        assert!(out.contains("<h1>Title</h1>"), "{out}");
        assert!(out.contains("<em>words</em>") && out.contains("<code>code</code>"), "{out}");
        assert!(out.contains("<pre><code class=\"language-python\">x = 1 &lt; 2"), "{out}");
        assert!(!out.contains("<script"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(out.contains("<table>"), "{out}");
    }

    #[test]
    fn links_keep_only_safe_targets_and_images_become_links() {
        let out = to_html(
            "[a](https://example.org/x) [b](javascript:alert(1)) [c](other.md) [d](#part) [e](mailto:a@b.c) [f]( JavaScript:x)\n\n![plot](https://example.org/p.png) ![x](data:image/png;base64,AAAA)\n",
        );
        assert!(out.contains("href=\"https://example.org/x\""), "{out}");
        assert!(!out.to_ascii_lowercase().contains("javascript"), "{out}");
        assert!(
            out.contains("href=\"other.md\"") && out.contains("href=\"#part\"") && out.contains("mailto:a@b.c"),
            "{out}"
        );
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("<a href=\"https://example.org/p.png\">plot</a>"), "{out}");
        assert!(!out.contains("data:"), "{out}");
    }
}
