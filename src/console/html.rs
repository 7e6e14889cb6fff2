//! Writing HTML safely: every value that came from the cluster (names, messages, annotations —
//! user input) goes through [`E`], which escapes it; markup is only ever a literal of the code.
//! Links are built from escaped, percent-encoded parts ([`U`]).

use std::fmt::{self, Display, Write};

/// A value written as text into HTML (element content or a quoted attribute value): `&`, `<`,
/// `>`, `"` and `'` are escaped, so nothing in it can open a tag, end an attribute or start a
/// script.
pub struct E<'a>(pub &'a str);

impl Display for E<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A value written as one path segment or query value of a URL, then as HTML: everything but
/// RFC 3986's unreserved characters is percent-encoded (so `/`, `?`, `#`, `&` and quotes cannot
/// change the link), which also leaves nothing to escape for HTML.
pub struct U<'a>(pub &'a str);

impl Display for U<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                f.write_char(char::from(b))?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

/// Decodes one percent-encoded path segment (`None` when it is not UTF-8 once decoded).
pub fn decode_segment(segment: &str) -> Option<String> {
    let raw = segment.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (raw[i], raw.get(i + 1).and_then(|b| hex(*b)), raw.get(i + 2).and_then(|b| hex(*b))) {
            (b'%', Some(hi), Some(lo)) => {
                bytes.push(u8::try_from(hi * 16 + lo).ok()?);
                i += 3;
            }
            (b, _, _) => {
                bytes.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(bytes).ok()
}

/// The `<!doctype>` to `<main>` of every page, and the end. `watch` lists the changes that make
/// the page fetch its content again (`kind/namespace/name`, `kind/*`, or `*`); `nav` the
/// section of the main navigation the page belongs to.
pub struct Layout<'a> {
    pub title: &'a str,
    pub nav: Nav,
    pub watch: &'a str,
    /// The management cluster's context, said in the header.
    pub context: &'a str,
}

/// The sections of the main navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Fleet,
    Rollouts,
    Releases,
    Preview,
}

impl Layout<'_> {
    /// A whole page around `content` (the inside of `<main>`, already HTML).
    pub fn page(&self, content: &str) -> String {
        let mut out = String::with_capacity(content.len() + 2048);
        let _ = write!(
            out,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <meta name=\"color-scheme\" content=\"light dark\">\
             <title>{} · stacksync console</title>\
             <link rel=\"stylesheet\" href=\"/assets/console.css\">\
             <script src=\"/assets/console.js\" defer></script></head>\
             <body data-watch=\"{}\">\
             <a class=\"skip\" href=\"#content\">Skip to the content</a>\
             <header><nav aria-label=\"Main\"><span class=\"brand\">stacksync</span>",
            E(self.title),
            E(self.watch)
        );
        for (nav, href, label) in [
            (Nav::Fleet, "/", "Fleet"),
            (Nav::Rollouts, "/rollouts", "Rollouts"),
            (Nav::Releases, "/releases", "Releases"),
            (Nav::Preview, "/preview", "Preview"),
        ] {
            let current = if nav == self.nav { " aria-current=\"page\"" } else { "" };
            let _ = write!(out, "<a href=\"{href}\"{current}>{label}</a>");
        }
        let _ = writeln!(
            out,
            "</nav><span class=\"context\">context <b>{}</b> · read-only</span></header>\
             <div id=\"banner\" class=\"banner\" role=\"alert\" hidden></div>\
             <main id=\"content\" tabindex=\"-1\">{content}</main></body></html>",
            E(self.context)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_every_character_that_could_start_markup() {
        let cases = [
            ("plain-name", "plain-name"),
            ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
            ("\" onmouseover=\"x", "&quot; onmouseover=&quot;x"),
            ("' autofocus onfocus='x", "&#39; autofocus onfocus=&#39;x"),
            ("a & b", "a &amp; b"),
            ("&lt;", "&amp;lt;"),
            ("", ""),
            ("ünïcode → ok", "ünïcode → ok"),
        ];
        for (input, want) in cases {
            assert_eq!(E(input).to_string(), want, "{input}");
        }
    }

    #[test]
    fn url_parts_cannot_leave_their_segment() {
        assert_eq!(U("team-a").to_string(), "team-a");
        assert_eq!(U("a/b?c#d&e").to_string(), "a%2Fb%3Fc%23d%26e");
        assert_eq!(U("\"><script>").to_string(), "%22%3E%3Cscript%3E");
        assert_eq!(decode_segment("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(decode_segment("%FF"), None);
    }

    #[test]
    fn a_page_escapes_its_title_and_context() {
        let page = Layout { title: "<b>", nav: Nav::Fleet, watch: "*", context: "<i>" }.page("<p>ok</p>");
        assert!(page.contains("<title>&lt;b&gt; · stacksync console</title>"));
        assert!(page.contains("context <b>&lt;i&gt;</b>"));
        assert!(page.contains("<main id=\"content\" tabindex=\"-1\"><p>ok</p></main>"));
        assert!(page.contains("<a href=\"/\" aria-current=\"page\">Fleet</a>"));
        assert!(!page.contains("<script>"), "no inline script: the only script is /assets/console.js");
    }
}
