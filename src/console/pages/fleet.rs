//! The Fleet page (`/`): the counts by state, subscription, release and Kubernetes minor, and a
//! table of every Cluster, filtered, sorted and paged by the query parameters.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Ctx, badge, time};
use crate::console::html::{E, U};
use crate::console::view::{self, Query, Snapshot, Sort, State};

/// The page's content for `q`.
pub fn content(s: &Snapshot, q: &Query, ctx: &Ctx) -> String {
    let page = view::page(view::rows(s), q);
    let mut out = String::with_capacity(16 * 1024 + page.rows.len() * 600);
    out.push_str("<h1>Fleet</h1>");
    let c = &page.counts;
    let _ = write!(out, "<section aria-labelledby=\"by-state\"><h2 id=\"by-state\">{} Clusters by state</h2><ul class=\"tiles\">", c.total);
    for state in State::ALL {
        let n = c.by_state.get(&state).copied().unwrap_or(0);
        if n == 0 && state == State::Unmanaged {
            continue;
        }
        let _ = write!(
            out,
            "<li><a class=\"tile\" data-state=\"{}\" href=\"/?{}\">",
            state.word(),
            E(&q.to_query(|q| (q.state, q.page) = (Some(state), 1)))
        );
        badge(&mut out, state);
        let _ = write!(out, " <b class=\"n\">{n}</b></a></li>");
    }
    out.push_str("</ul></section><div class=\"groups\">");
    group(&mut out, "By subscription", "sub", &c.by_subscription, q, |q, v| q.subscription = v);
    group(&mut out, "By release applied", "release", &c.by_release, q, |q, v| q.release = v);
    group(&mut out, "By Kubernetes minor", "minor", &c.by_minor, q, |q, v| q.minor = v);
    out.push_str("</div>");
    filter_form(&mut out, q);
    let (first, last) = match page.rows.len() {
        0 => (0, 0),
        n => ((q.page - 1) * q.per_page + 1, (q.page - 1) * q.per_page + n),
    };
    let _ =
        write!(out, "<p id=\"matching\" role=\"status\">Clusters {first}–{last} of {} matching ({} in all).</p>", page.matching, c.total);
    out.push_str("<div class=\"scroll\"><table id=\"fleet\"><thead><tr>");
    for (label, sort) in [
        ("Namespace", Some(Sort::Name)),
        ("Name", None),
        ("State", Some(Sort::State)),
        ("Class", Some(Sort::Class)),
        ("Release applied", Some(Sort::Release)),
        ("Synced", Some(Sort::Synced)),
        ("Reason", None),
        ("First problem", None),
        ("Last sync", Some(Sort::LastSync)),
        ("Wave", Some(Sort::Wave)),
    ] {
        match sort {
            Some(sort) => {
                let (desc, arrow, aria) = match (q.sort == sort, q.descending) {
                    (true, false) => (true, " ▲", " aria-sort=\"ascending\""),
                    (true, true) => (false, " ▼", " aria-sort=\"descending\""),
                    (false, _) => (false, "", ""),
                };
                let _ = write!(
                    out,
                    "<th scope=\"col\"{aria}><a href=\"/?{}\">{label}{arrow}</a></th>",
                    E(&q.to_query(|q| (q.sort, q.descending, q.page) = (sort, desc, 1)))
                );
            }
            None => {
                let _ = write!(out, "<th scope=\"col\">{label}</th>");
            }
        }
    }
    out.push_str("</tr></thead><tbody>");
    for r in &page.rows {
        let _ = write!(
            out,
            "<tr data-cluster=\"{}/{}\" data-state=\"{}\"><td>{}</td><td>",
            E(r.namespace),
            E(r.name),
            r.state.word(),
            E(r.namespace)
        );
        let _ = write!(out, "<a href=\"/clusters/{}/{}\">{}</a></td><td>", U(r.namespace), U(r.name), E(r.name));
        badge(&mut out, r.state);
        let synced = r.synced.map(|(s, t)| format!("{s}/{t}")).unwrap_or_default();
        let _ = write!(
            out,
            "</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"problem\">{}</td><td>",
            E(r.class.as_deref().unwrap_or_default()),
            E(r.applied.unwrap_or_default()),
            E(&synced),
            E(r.reason),
            E(r.problem)
        );
        if let Some(t) = r.last_sync {
            time(&mut out, t, ctx.now);
        }
        out.push_str("</td><td>");
        if let Some(w) = &r.wave {
            let _ = write!(out, "<a href=\"/rollouts/{}\">{} {}/{}</a>", U(w.release), E(w.release), w.wave, w.waves);
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table></div>");
    let pages = page.matching.div_ceil(q.per_page).max(1);
    let _ = write!(out, "<nav class=\"pages\" aria-label=\"Pages\"><span>Page {} of {pages}</span>", q.page.min(pages));
    if q.page > 1 {
        let _ = write!(out, " <a rel=\"prev\" href=\"/?{}\">← Previous</a>", E(&q.to_query(|q| q.page -= 1)));
    }
    if q.page < pages {
        let _ = write!(out, " <a rel=\"next\" href=\"/?{}\">Next →</a>", E(&q.to_query(|q| q.page += 1)));
    }
    out.push_str("</nav>");
    if page.rows.is_empty() && c.total == 0 {
        out.push_str("<p class=\"muted\">No Clusters yet.</p>");
    }
    out
}

fn group(out: &mut String, title: &str, id: &str, counts: &BTreeMap<String, usize>, q: &Query, set: impl Fn(&mut Query, Option<String>)) {
    let _ = write!(out, "<section aria-labelledby=\"g-{id}\"><h2 id=\"g-{id}\">{title}</h2><ul class=\"counts\">");
    // The largest first, the first 12: a long tail is one filter away.
    let mut sorted: Vec<(&String, &usize)> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (value, n) in sorted.iter().take(12) {
        let link = q.to_query(|q| {
            set(q, Some((*value).clone()));
            q.page = 1;
        });
        let _ = write!(out, "<li data-{id}=\"{}\"><a href=\"/?{}\">{}</a> <b>{n}</b></li>", E(value), E(&link), E(value));
    }
    if sorted.len() > 12 {
        let _ = write!(out, "<li class=\"muted\">… {} more</li>", sorted.len() - 12);
    }
    out.push_str("</ul></section>");
}

fn filter_form(out: &mut String, q: &Query) {
    out.push_str("<form class=\"filter\" method=\"get\" action=\"/\" role=\"search\">");
    let _ = write!(
        out,
        "<label>Filter <input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"name, class, reason…\"></label>",
        E(&q.text)
    );
    out.push_str("<label>State <select name=\"state\"><option value=\"\">any</option>");
    for s in State::ALL {
        let selected = if q.state == Some(s) { " selected" } else { "" };
        let _ = write!(out, "<option{selected}>{}</option>", s.word());
    }
    out.push_str("</select></label>");
    for (name, value) in [("ns", &q.namespace), ("release", &q.release), ("minor", &q.minor), ("sub", &q.subscription)] {
        if let Some(v) = value {
            let _ = write!(out, "<label>{name} <input name=\"{name}\" value=\"{}\"></label>", E(v));
        }
    }
    if q.sort != Sort::State {
        let _ = write!(out, "<input type=\"hidden\" name=\"sort\" value=\"{}\">", q.sort.key());
    }
    if q.descending {
        out.push_str("<input type=\"hidden\" name=\"desc\" value=\"1\">");
    }
    out.push_str("<button type=\"submit\">Apply</button> <a href=\"/\">Clear</a></form>");
}
