//! `/doctor [verbose]` and `opencouch doctor`: the configuration and where
//! each value came from, then the service's checks (database, data
//! directory, embedding model, model endpoint, semantic signal, crisis
//! directory), each ok / warning / error with the fix.

use std::path::{Path, PathBuf};

use opencouch_config::Settings;
use opencouch_runtime::service::{CheckLevel, DoctorCheck, Service};
use serde_json::{Value, json};

/// Where the settings came from, as the command line knows it.
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// The config file read, if any.
    pub config_file: Option<PathBuf>,
    /// Settings given as flags (`mode`, `data_dir`, `database`, `memory_mode`).
    pub flags: Vec<&'static str>,
}

/// One configuration value and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRow {
    /// The setting.
    pub key: &'static str,
    /// Its value (secrets masked).
    pub value: String,
    /// `flag`, `environment (NAME)`, `config file` or `default`.
    pub source: String,
}

/// The doctor's report.
#[derive(Debug, Clone)]
pub struct Report {
    /// The configuration file line.
    pub config_file: Option<PathBuf>,
    /// Every setting with its source.
    pub config: Vec<ConfigRow>,
    /// The checks.
    pub checks: Vec<DoctorCheck>,
}

/// The environment variables that can set `key`, in the order the config
/// crate reads them (the later wins).
fn env_names(key: &str) -> Vec<String> {
    let own = match key {
        "database" => "DATABASE_URL".to_owned(),
        k => k.to_uppercase(),
    };
    let mut names = vec![format!("OPENCOUCH_{own}")];
    match key {
        "api_key" => names.push("OPENAI_API_KEY".to_owned()),
        "base_url" => names.push("OPENAI_BASE_URL".to_owned()),
        "fast_model" | "quality_model" => names.push("OPENAI_MODEL".to_owned()),
        _ => {}
    }
    names
}

fn file_sets(text: &str, key: &str) -> bool {
    let key = if key == "database" {
        "database_url"
    } else {
        key
    };
    text.lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    })
}

/// Where `key` came from.
pub fn source_of(
    key: &'static str,
    prov: &Provenance,
    file_text: Option<&str>,
    env: &dyn Fn(&str) -> bool,
) -> String {
    if prov.flags.contains(&key) {
        return "flag".to_owned();
    }
    if let Some(name) = env_names(key).into_iter().rev().find(|n| env(n)) {
        return format!("environment ({name})");
    }
    if file_text.is_some_and(|t| file_sets(t, key)) {
        return "config file".to_owned();
    }
    "default".to_owned()
}

/// Runs the checks.
pub async fn check(settings: &Settings, prov: &Provenance, service: &Service) -> Report {
    let file_text = prov
        .config_file
        .as_deref()
        .and_then(|p: &Path| std::fs::read_to_string(p).ok());
    let env = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let config = settings
        .display_rows()
        .into_iter()
        .map(|(key, value)| ConfigRow {
            key,
            source: source_of(key, prov, file_text.as_deref(), &env),
            value,
        })
        .collect();
    Report {
        config_file: prov.config_file.clone(),
        config,
        checks: service.doctor(settings).await,
    }
}

impl Report {
    /// The report for a person: the checks, then (verbose) every setting.
    pub fn text(&self, verbose: bool) -> String {
        let mut out = Vec::new();
        for c in &self.checks {
            out.push(format!(
                "{:<8} {:<17} {}",
                c.level.as_str(),
                c.name,
                c.detail
            ));
            if let Some(fix) = &c.fix {
                out.push(format!("{:<8} {:<17} fix: {fix}", "", ""));
            }
        }
        let changed = self.config.iter().filter(|r| r.source != "default").count();
        out.push(format!(
            "{:<8} {:<17} file {}; {} of {} settings not default{}",
            "ok",
            "configuration",
            self.config_file
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), |p| p.display().to_string()),
            changed,
            self.config.len(),
            if verbose {
                ""
            } else {
                " (/doctor verbose lists them)"
            }
        ));
        if verbose {
            let width = self.config.iter().map(|r| r.key.len()).max().unwrap_or(0);
            for r in &self.config {
                out.push(format!("  {:<width$}  {}  [{}]", r.key, r.value, r.source));
            }
        }
        out.join("\n")
    }

    /// Whether any check is an error.
    pub fn has_error(&self) -> bool {
        self.checks.iter().any(|c| c.level == CheckLevel::Error)
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name, "level": c.level.as_str(), "detail": c.detail, "fix": c.fix,
            })).collect::<Vec<_>>(),
            "config_file": self.config_file.as_ref().map(|p| p.display().to_string()),
            "config": self.config.iter().map(|r| json!({
                "key": r.key, "value": r.value, "source": r.source,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_flag_then_environment_then_file_then_default() {
        let prov = Provenance {
            config_file: None,
            flags: vec!["mode"],
        };
        let file = "fast_model = \"x\"\n# base_url = \"y\"\n";
        let env = |n: &str| n == "OPENAI_BASE_URL" || n == "OPENCOUCH_MODE";
        assert_eq!(source_of("mode", &prov, Some(file), &env), "flag");
        assert_eq!(
            source_of("base_url", &prov, Some(file), &env),
            "environment (OPENAI_BASE_URL)"
        );
        assert_eq!(
            source_of("fast_model", &prov, Some(file), &env),
            "config file"
        );
        assert_eq!(source_of("listen", &prov, Some(file), &env), "default");
    }
}
