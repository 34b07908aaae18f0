//! The provider checklist (`src/verify/mod.rs`, "Adding a provider"), checked: every name in
//! the catalog has its file, its rows in the README's and docs/providers.md's tables, and an
//! end-to-end test that names it. A preset added to the catalog and forgotten in one of these
//! places fails here, naming the place.

use std::path::Path;

use portaria::verify::PROVIDERS;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The file under `src/verify/` that owns a provider's rules.
fn file_of(provider: &str) -> String {
    match provider {
        "svix" | "standard-webhooks" => "standard_webhooks".into(),
        "openpix" => "woovi".into(),
        "hmac" => "hmac_scheme".into(),
        other => other.replace('-', "_"),
    }
}

/// The first cells of a markdown document's table rows.
fn first_cells(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_provider_is_on_every_list() {
    let verify_mod = read("src/verify/mod.rs");
    let readme = first_cells(&read("README.md"));
    let providers_doc = first_cells(&read("docs/providers.md"));
    let mut tests = String::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it")).unwrap()
    {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".rs") && !["provider_checklist.rs", "layout.rs"].contains(&name.as_str())
        {
            tests += &std::fs::read_to_string(&path).unwrap();
        }
    }
    assert!(PROVIDERS.len() > 25, "{PROVIDERS:?}");
    let mut missing = Vec::new();
    for provider in PROVIDERS {
        let file = file_of(provider);
        let quoted = format!("`{provider}`");
        if !Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("src/verify/{file}.rs"))
            .exists()
            || !verify_mod.contains(&format!("mod {file};"))
        {
            missing.push(format!(
                "{provider}: src/verify/{file}.rs and its `mod` line"
            ));
        }
        if !readme.iter().any(|cell| cell.contains(&quoted)) {
            missing.push(format!("{provider}: a row in README.md's provider table"));
        }
        if !providers_doc.iter().any(|cell| cell.contains(&quoted)) {
            missing.push(format!("{provider}: a row in docs/providers.md"));
        }
        if !tests.contains(&format!("\"{provider}\"")) {
            missing.push(format!("{provider}: a test in tests/it/ naming it"));
        }
    }
    assert!(
        missing.is_empty(),
        "the provider checklist:\n{}",
        missing.join("\n")
    );
}
