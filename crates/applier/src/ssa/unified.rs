//! Unified diffs of two texts, line by line (`diff -u` layout, 3 lines of context), for
//! a `diff` command. Manifests are small: a longest-common-subsequence table is exact and
//! fast enough; beyond `MAX_CELLS` the whole text is shown as replaced.

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Largest LCS table (lines × lines) computed.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Del,
    Add,
}

/// `old` and `new` as a unified diff with `---`/`+++` headers; empty when they are equal.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    if old == new {
        return String::new();
    }
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = script(&a, &b);
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Each op with its line numbers in a and b (1-based after it is emitted).
    let mut positions = Vec::with_capacity(ops.len());
    let (mut i, mut j) = (0usize, 0usize);
    for op in &ops {
        positions.push((i, j));
        match op {
            Op::Same => {
                i += 1;
                j += 1;
            }
            Op::Del => i += 1,
            Op::Add => j += 1,
        }
    }
    let changed: Vec<usize> = ops.iter().enumerate().filter(|(_, o)| **o != Op::Same).map(|(k, _)| k).collect();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * CONTEXT {
            end = changed[k];
            k += 1;
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let (a0, b0) = positions[start];
        let del = ops[start..end].iter().filter(|o| **o != Op::Add).count();
        let add = ops[start..end].iter().filter(|o| **o != Op::Del).count();
        out.push_str(&format!("@@ -{} +{} @@\n", range(a0, del), range(b0, add)));
        for (op, &(ia, jb)) in ops[start..end].iter().zip(&positions[start..end]) {
            match op {
                Op::Same => out.push_str(&format!(" {}\n", a[ia])),
                Op::Del => out.push_str(&format!("-{}\n", a[ia])),
                Op::Add => out.push_str(&format!("+{}\n", b[jb])),
            }
        }
    }
    out
}

/// `start,count` as `diff -u` writes it (1-based; an empty range names the line before).
fn range(start: usize, count: usize) -> String {
    match count {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        n => format!("{},{n}", start + 1),
    }
}

/// The edit script turning `a` into `b`.
fn script(a: &[&str], b: &[&str]) -> Vec<Op> {
    // Common head and tail are cheap and keep the table small.
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops = vec![Op::Same; head];
    if (ma.len() + 1).saturating_mul(mb.len() + 1) > MAX_CELLS {
        ops.extend(std::iter::repeat_n(Op::Del, ma.len()));
        ops.extend(std::iter::repeat_n(Op::Add, mb.len()));
    } else {
        let w = mb.len() + 1;
        // lcs[i * w + j]: LCS length of ma[i..] and mb[j..].
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] { lcs[(i + 1) * w + j + 1] + 1 } else { lcs[(i + 1) * w + j].max(lcs[i * w + j + 1]) };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() && j < mb.len() {
            if ma[i] == mb[j] {
                ops.push(Op::Same);
                i += 1;
                j += 1;
            } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
                ops.push(Op::Del);
                i += 1;
            } else {
                ops.push(Op::Add);
                j += 1;
            }
        }
        ops.extend(std::iter::repeat_n(Op::Del, ma.len() - i));
        ops.extend(std::iter::repeat_n(Op::Add, mb.len() - j));
    }
    ops.extend(std::iter::repeat_n(Op::Same, tail));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\nb\n", "a\nb\n", "x", "y"), "");
    }

    #[test]
    fn a_changed_line_with_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(unified(old, new, "live", "desired"), "--- live\n+++ desired\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
    }

    #[test]
    fn far_apart_changes_make_two_hunks_and_additions_count() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=20)
            .map(|i| {
                if i == 2 {
                    "two\n".to_owned()
                } else if i == 19 {
                    "19\nnew\n".to_owned()
                } else {
                    format!("{i}\n")
                }
            })
            .collect();
        let d = unified(&old, &new, "a", "b");
        assert_eq!(d.matches("@@").count(), 4, "{d}");
        assert!(d.contains("-2\n+two\n") && d.contains("+new\n"), "{d}");
        assert!(d.contains("@@ -17,4 +17,5 @@"), "{d}");
    }

    #[test]
    fn from_nothing_everything_is_added() {
        assert_eq!(unified("", "a\nb\n", "/dev/null", "new"), "--- /dev/null\n+++ new\n@@ -0,0 +1,2 @@\n+a\n+b\n");
    }
}
