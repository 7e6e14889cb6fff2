//! Validation of `webhooks:`: where the push webhooks' shared secrets are kept. The secrets
//! themselves are files, read by the admin listener when a delivery arrives (and re-read when
//! they change), so a rotated secret needs no reload and never appears in the config.

use std::path::{Path, PathBuf};

use super::WebhooksConfig;
use super::validate::Cx;
use super::yaml::Node;

impl Cx {
    pub(super) fn webhooks(&mut self, node: &Node, base: &Path) -> Option<WebhooksConfig> {
        let f = self.fields(node, "webhooks", &["github", "generic"])?;
        let mut out = WebhooksConfig::default();
        if let Some(n) = f.get("github")
            && let Some(g) = self.fields(n, "webhooks.github", &["secretFile"])
        {
            out.github_secret_file = self.file_path(&g, "secretFile", base);
        }
        if let Some(n) = f.get("generic")
            && let Some(g) = self.fields(n, "webhooks.generic", &["tokenFile"])
        {
            out.generic_token_file = self.file_path(&g, "tokenFile", base);
        }
        Some(out)
    }

    /// A required, non-empty file path, relative to the config file's directory.
    fn file_path(&mut self, f: &super::validate::Fields<'_>, key: &str, base: &Path) -> Option<PathBuf> {
        let p = self.required_string(f, key)?;
        if p.trim().is_empty() {
            let mark = f.get(key).map(|n| n.mark)?;
            self.error(mark, &f.path(key), "expected a file path, found an empty string");
            return None;
        }
        Some(base.join(p))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "apiVersion: stacksync.io/v1alpha1\nkind: Config\ncache: {dir: c}\ntarget: {directory: out}\n";

    fn parse(extra: &str) -> Result<Config, Vec<String>> {
        let text = format!("{BASE}{extra}");
        Config::parse(std::path::Path::new("/etc/s/config.yaml"), &text).map_err(|e| e.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn webhooks_paths_are_relative_to_the_config_file() {
        let c = parse("webhooks:\n  github: {secretFile: gh-secret}\n  generic: {tokenFile: /run/token}\n").unwrap();
        assert_eq!(c.webhooks.github_secret_file.as_deref(), Some(std::path::Path::new("/etc/s/gh-secret")));
        assert_eq!(c.webhooks.generic_token_file.as_deref(), Some(std::path::Path::new("/run/token")));
        assert_eq!(parse("").unwrap().webhooks, super::WebhooksConfig::default());
    }

    #[test]
    fn webhooks_errors_name_line_and_field() {
        let errors = parse("webhooks:\n  github: {secret: x}\n  generic: {tokenFile: \"\"}\n  gitlab: {}\n").unwrap_err();
        let text = errors.join("\n");
        assert!(text.contains("/etc/s/config.yaml:6:12: webhooks.github.secret: unknown field"), "{text}");
        assert!(text.contains("webhooks.github.secretFile: missing required field"), "{text}");
        assert!(text.contains(":7:") && text.contains("webhooks.generic.tokenFile: expected a file path"), "{text}");
        assert!(text.contains(":8:3: webhooks.gitlab: unknown field"), "{text}");
    }
}
