//! Build metadata for `stacksync --version`: the commit (from git when the source is a checkout,
//! else `STACKSYNC_COMMIT`, else `unknown`) and the build date (UTC, from `SOURCE_DATE_EPOCH`
//! for reproducible builds, else `STACKSYNC_BUILD_DATE`, else today).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// Days since 1970-01-01 as a civil date (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn main() {
    for var in ["STACKSYNC_COMMIT", "STACKSYNC_BUILD_DATE", "SOURCE_DATE_EPOCH"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    // A new commit or checkout moves HEAD's reflog; that is when the commit changes.
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo::rerun-if-changed={p}");
        }
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .or_else(|| std::env::var("STACKSYNC_COMMIT").ok().filter(|c| !c.is_empty()))
        .unwrap_or_else(|| "unknown".into());
    let date = match std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|s| s.parse::<i64>().ok()) {
        Some(epoch) => Some(epoch),
        None => match std::env::var("STACKSYNC_BUILD_DATE") {
            Ok(d) if !d.is_empty() && d != "unknown" => {
                println!("cargo::rustc-env=STACKSYNC_BUILD_DATE={d}");
                None
            }
            _ => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs() as i64),
        },
    };
    if let Some(epoch) = date {
        let (y, m, d) = civil(epoch.div_euclid(86_400));
        println!("cargo::rustc-env=STACKSYNC_BUILD_DATE={y:04}-{m:02}-{d:02}");
    }
    println!("cargo::rustc-env=STACKSYNC_COMMIT={commit}");
}
