//! The checks people run on a GitHub Action, on `action.yml`: `@action-validator/cli` and
//! `check-jsonschema`'s vendored GitHub Actions schema for the metadata, and `zizmor` for template
//! injection, unpinned actions and the other action security audits — no finding. Each check is
//! shown to fail on a copy of the action with the mistake it is there to catch. Opt-in with
//! `ACODE_E2E_NET=1` (the tools come from the npm registry and PyPI).

use std::path::Path;
use std::process::Output;

use super::tools;
use crate::harness::*;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn zizmor(file: &Path) -> Output {
    tools::python("zizmor")
        .args(["--offline", "--no-progress"])
        .arg(file)
        .output()
        .unwrap()
}

fn schema(file: &Path) -> Output {
    tools::python("check-jsonschema")
        .args(["--builtin-schema", "vendor.github-actions"])
        .arg(file)
        .output()
        .unwrap()
}

fn validator(file: &Path) -> Output {
    tools::node("action-validator").arg(file).output().unwrap()
}

#[test]
fn the_action_passes_action_validator_check_jsonschema_and_zizmor() {
    if !e2e_net("@action-validator/cli, check-jsonschema and zizmor") {
        return;
    }
    let action = repo().join("action.yml");
    for (tool, out) in [
        ("action-validator", validator(&action)),
        ("check-jsonschema", schema(&action)),
        ("zizmor", zizmor(&action)),
    ] {
        assert!(out.status.success(), "{tool}:\n{}", text(&out));
    }
    assert!(text(&zizmor(&action)).contains("No findings"));

    // Each check catches what it is there for, on a copy with that mistake.
    let t = TestDir::new();
    let original = std::fs::read_to_string(&action).unwrap();
    let copy = t.root.join("action.yml");
    // An input expanded in a script: template injection.
    let injected = original.replacen(
        "run: bash \"$GITHUB_ACTION_PATH/scripts/action/cache-key.sh\"",
        "run: echo \"${{ inputs.plan }}\"",
        1,
    );
    assert_ne!(injected, original);
    std::fs::write(&copy, injected).unwrap();
    let out = zizmor(&copy);
    assert!(
        !out.status.success() && text(&out).contains("template-injection"),
        "{}",
        text(&out)
    );
    // An action by a moving tag.
    let unpinned = original.replacen(
        "actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830 # v4.3.0",
        "actions/cache@v4",
        1,
    );
    assert_ne!(unpinned, original);
    std::fs::write(&copy, unpinned).unwrap();
    let out = zizmor(&copy);
    assert!(
        !out.status.success() && text(&out).contains("unpinned-uses"),
        "{}",
        text(&out)
    );
    // A composite step without its shell: invalid metadata.
    let no_shell = original.replacen("      shell: bash\n", "", 1);
    std::fs::write(&copy, no_shell).unwrap();
    for (tool, out) in [
        ("action-validator", validator(&copy)),
        ("check-jsonschema", schema(&copy)),
    ] {
        assert!(
            !out.status.success(),
            "{tool} accepted a step without shell:\n{}",
            text(&out)
        );
    }
}
