use crate::policy::commands::*;

/// A workspace with a `sub/` directory, one for the whole test binary: the checks only read it,
/// and one per check left thousands of directories in the temporary directory.
fn ws() -> Workspace {
    static WS: std::sync::OnceLock<Workspace> = std::sync::OnceLock::new();
    WS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("acode-cmds-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        Workspace::new(&dir).unwrap()
    })
    .clone()
}

fn argv(s: &str) -> Vec<String> {
    split_command(s).unwrap()
}

fn check_with(p: &Policy, s: &str) -> Result<(), SandboxViolation> {
    let w = ws();
    let root = w.root().to_path_buf();
    check_argv(&argv(s), p, &w, &root)
}

fn check(s: &str) -> Result<(), SandboxViolation> {
    check_with(&Policy::default(), s)
}

fn find_policy() -> Policy {
    Policy::parse(r#"{"allow_commands":["find"]}"#).unwrap()
}

#[test]
fn splitting_follows_posix_quoting() {
    assert_eq!(
        argv("echo 'a b' \"c d\" e\\ f"),
        ["echo", "a b", "c d", "e f"]
    );
    assert_eq!(split_command("  "), Err(CommandError::Empty));
    assert_eq!(split_command(""), Err(CommandError::Empty));
    for bad in ["echo 'oops", "echo \"oops", "echo oops\\", "echo a\0b"] {
        assert!(split_command(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn allowed_commands_pass() {
    for ok in [
        "cargo test --quiet",
        "cargo +nightly check -Z unstable-options",
        "cargo build --target-dir target/x",
        "cargo test -- --nocapture --config x",
        "git status",
        "git switch -c feature",
        "git log -c",
        "git -C sub status",
        "git commit -m 'fix: handle a=b and c'",
        "git commit -m--output",
        "git commit --message=--exec",
        "git commit -qm 'x -c y'",
        "git config user.email dev@example.com",
        "git config set user.name Bot",
        "git config --get core.bare",
        "git config -l",
        "git config --get-regexp '^alias\\.' x",
        "git diff --no-ext-diff --output-indicator-new=+ HEAD",
        "git log --oneline -5",
        "git rebase -i HEAD~2",
        "git rebase --continue",
        "git merge -s ort -X theirs main",
        "git grep -e foo -C 2",
        "git init",
        "git init .",
        "git mv a.txt sub/b.txt",
        "git format-patch -o patches HEAD~1",
        "git --no-pager log",
        "git log -s --oneline",
        "git status -s --porcelain",
        "git commit -s -m x",
        "git show -s --format=%H",
        "cargo doc --no-deps",
        "go clean",
        "git add -A",
        "git add .",
        "git stash push -m wip",
        "echo hello world",
        "grep -rn 'fn main' src",
        "head -c 100 /dev/zero",
        "python3 -m pytest -q",
        "sort -u file.txt",
        "sort -o out.txt in.txt",
        "sort --output=sub/out.txt in.txt",
        "sort -rno out.txt in.txt",
        "sort -k2o in.txt",
        "sort -T sub in.txt",
        "sort -t, -k2 in.txt",
        "make -j4 test",
        "make CFLAGS=-O2",
        "npm test",
        "npm run build -- --prod",
        "node app.js -r x",
        "node -e 'console.log(1)'",
        "go build -o bin/app ./...",
        "go test -run TestX ./...",
        "rustc -o sub/main main.rs",
    ] {
        assert!(check(ok).is_ok(), "{ok:?} should pass: {:?}", check(ok));
    }
}

#[test]
fn programs_must_be_bare_allowlisted_names() {
    for bad in [
        "rm -rf /",
        "/bin/sh -c true",
        "./cargo build",
        "bash -c true",
        "sh -c true",
        "sudo ls",
        "curl http://example.com",
        "../../usr/bin/git status",
    ] {
        assert!(check(bad).is_err(), "{bad:?} should be refused");
    }
    let w = ws();
    let root = w.root().to_path_buf();
    assert!(check_argv(&[], &Policy::default(), &w, &root).is_err());
    assert!(check_argv(&["".into()], &Policy::default(), &w, &root).is_err());
}

#[test]
fn policy_additions_and_replacements_are_honoured() {
    let p = Policy::parse(r#"{"allow_commands":["rg","find"]}"#).unwrap();
    assert!(check_with(&p, "rg foo").is_ok());
    assert!(check_with(&p, "find . -name x").is_ok());
    let w = ws();
    let root = w.root().to_path_buf();
    assert!(needs_confirmation(&argv("rg foo"), &p, &w, &root));
    assert!(!needs_confirmation(&argv("cargo test"), &p, &w, &root));
    assert!(needs_confirmation(&[], &p, &w, &root));
    let p = Policy::parse(r#"{"commands":["git","cat"]}"#).unwrap();
    assert!(check_with(&p, "git status").is_ok());
    assert!(check_with(&p, "python3 -c 1").is_err());
    assert!(check_with(&p, "node -e 1").is_err());
}

#[test]
fn argv_elements_are_data() {
    let w = ws();
    let root = w.root().to_path_buf();
    for v in [
        vec!["python3", "-c", "x = 1; print(x)"],
        vec!["grep", "-E", "a|b", "f"],
        vec!["echo", "a;b", "$(x)", "`y`", "> z", "a\nb", "&&"],
    ] {
        let v: Vec<String> = v.into_iter().map(String::from).collect();
        assert!(
            check_argv(&v, &Policy::default(), &w, &root).is_ok(),
            "{v:?}"
        );
    }
    let v = vec!["echo".to_string(), "a\0b".to_string()];
    assert!(check_argv(&v, &Policy::default(), &w, &root).is_err());
}

#[test]
fn command_strings_that_expect_a_shell_are_refused_with_the_argv_form() {
    for bad in [
        "echo a ; touch x",
        "echo a; touch x",
        "echo a;touch x",
        "echo a && touch x",
        "echo a & touch x",
        "echo a | cat",
        "grep -E a|b f",
        "echo a || touch x",
        "echo `touch x`",
        "echo $(touch x)",
        "echo \"$(touch x)\"",
        "echo a > x",
        "echo a >> x",
        "cat < /etc/passwd",
        "cargo test 2>&1",
        "echo a 2> x",
        "echo a\ntouch x",
        "echo a\r\ntouch x",
    ] {
        let err = check_command_line(bad);
        assert!(err.is_err(), "{bad:?} should be refused");
        let msg = err.unwrap_err().to_string();
        assert!(msg.contains("not run by a shell"), "{msg}");
        assert!(msg.contains("\"argv\": ["), "{msg}");
    }
    for ok in [
        "cargo test -- --nocapture",
        "echo 'a;b'",
        "grep -E 'a|b' f",
        "python3 -c 'x = 1; print(x)'",
        "echo \"a && b\"",
        "echo a\\;b",
        "echo 'a\nb'",
        "echo '$(x)' '`y`'",
        "echo price=$5",
        "git commit -m 'a > b'",
    ] {
        assert!(
            check_command_line(ok).is_ok(),
            "{ok:?}: {:?}",
            check_command_line(ok)
        );
    }
    let msg = check_command_line("grep -E a|b f").unwrap_err().to_string();
    assert!(msg.contains(r#"["grep","-E","a|b","f"]"#), "{msg}");
}

#[test]
fn dangerous_arguments_are_refused() {
    let p = find_policy();
    for bad in [
        "git -c core.pager=touch status",
        "git -ccore.pager=touch log",
        "git -C sub -c alias.x=!touch x",
        "git -p -c core.fsmonitor=x status",
        "git --config-env=core.pager=EVIL log",
        "git --config-env core.pager=EVIL log",
        "git --exec-path=/tmp status",
        "git --git-dir=elsewhere status",
        "git --work-tree /tmp status",
        "git --bare status",
        "git --help log",
        "git log --help",
        "git rebase --exec 'touch x' HEAD~2",
        "git rebase --exec=touch HEAD~2",
        "git rebase --exe=touch HEAD~2",
        "git rebase --ex touch HEAD~2",
        "git rebase -x touch HEAD~2",
        "git rebase -xtouch HEAD~2",
        "git rebase -ix touch HEAD~2",
        "git rebase -s evil HEAD~2",
        "git rebase --onto -C --exec=touch HEAD~2",
        "git rebase --onto -- --exec=touch HEAD~2",
        "git rebase --onto -C -x touch HEAD~2",
        "git diff --src-prefix --output=/tmp/x",
        "go build -tags -o /tmp/x",
        "make -j --eval=x",
        "git merge --strategy=evil main",
        "git merge -sevil main",
        "git fetch --upload-pack=touch origin",
        "git fetch --upload-pack touch origin",
        "git fetch --upl=touch origin",
        "git push --receive-pack=touch origin",
        "git push --exec=touch origin",
        "git ls-remote -u touch origin",
        "git fetch ext::touch",
        "git fetch 'evil::x'",
        "git diff --output=/tmp/x",
        "git diff --out=/tmp/x",
        "git log --output /tmp/x",
        "git diff --ext-diff",
        "git log --textconv -p",
        "git grep -Otouch foo",
        "git grep --open-files-in-pager=touch foo",
        "git grep --recurse-submodules foo",
        "git checkout --recurse-submodules main",
        "git apply --unsafe-paths x.patch",
        "git config core.pager touch",
        "git config core.sshCommand touch",
        "git config --global core.hooksPath hooks",
        "git config --glob user.name x",
        "git config --gl user.name x",
        "git config --system user.name x",
        "git config core.fsmonitor touch",
        "git config alias.x '!touch x'",
        "git config filter.x.clean touch",
        "git config --file x.cfg user.name y",
        "git config -f x.cfg user.name y",
        "git config --add user.name y",
        "git config --unset user.name",
        "git config --edit",
        "git config set core.pager x",
        "git config unset user.name",
        "git config include.path ../x.cfg",
        "git init /tmp/elsewhere",
        "git init sub",
        "git init --bare",
        "git init --template=tpl",
        "git init --separate-git-dir=../x",
        "git mv a.txt ../outside.txt",
        "git mv a.txt /tmp/x",
        "git mv a.txt sub/.git/config",
        "git format-patch -o /tmp/patches HEAD~1",
        "git format-patch --output-directory=../p HEAD~1",
        "git format-patch --output-dir=../p HEAD~1",
        "git -C /tmp status",
        "git -C .. status",
        "git difftool -x touch",
        "git submodule foreach touch x",
        "git bisect run touch x",
        "git filter-branch --tree-filter touch HEAD",
        "git send-email x",
        "git clone repo",
        "git worktree add ../x",
        "git clean -fdx",
        "git apply --build-fake-ancestor=/tmp/idx x.patch",
        "cargo doc --open",
        "cargo vendor /tmp/vendor",
        "npm link",
        "go clean -modcache",
        "git add -f .acode",
        "git add --for .acode",
        "git add -Af .",
        "git stash -u",
        "git stash push --include-untracked",
        "git stash --all",
        "git help log",
        "git x",
        "git mytool",
        "cargo --config target.x.runner=touch run",
        "cargo build --config=build.rustc-wrapper=touch",
        "cargo rustc -- -C linker=touch",
        "cargo build --target-dir /tmp/target",
        "cargo install ripgrep",
        "cargo new ../elsewhere",
        "rustc -C linker=touch main.rs",
        "rustc -Clinker=touch main.rs",
        "rustc -C link-arg=-B/tmp main.rs",
        "rustc -o /tmp/main main.rs",
        "rustc --emit=link=/tmp/x main.rs",
        "make --eval=x",
        "make --ev=x",
        "make -E x",
        "make SHELL=/tmp/sh",
        "make 'X!=touch m'",
        "make -C /tmp",
        "sort --compress-program=touch f",
        "sort --compress-prog=touch f",
        "sort --comp=touch f",
        "sort -o /tmp/elsewhere f",
        "sort -o ../elsewhere f",
        "sort --output=/tmp/x f",
        "sort --out=/tmp/x f",
        "sort -rno /tmp/x f",
        "sort -uo/tmp/x f",
        "sort -co/tmp/x f",
        "sort -cuo /tmp/x f",
        "sort -o .git/config f",
        "sort -T /tmp f",
        "sort --no-such-option f",
        "node -r ./evil.js app.js",
        "node --require=./evil.js app.js",
        "node --import ./evil.mjs app.js",
        "npm --script-shell=./evil test",
        "npm --script-sh=./evil test",
        "npm -g install x",
        "npm install --global x",
        "npm --prefix /tmp/x install",
        "npm config set script-shell x",
        "npm explore x",
        "go build -toolexec ./evil",
        "go test -exec=./evil ./...",
        "go build -o /tmp/app",
        "go install example.com/x@latest",
        "go env -w GOFLAGS=-toolexec=x",
        "find . -exec touch x {} +",
        "find . -execdir touch x",
        "find . -delete",
        "find . -fprint out",
        "find . -ok touch",
    ] {
        assert!(check_with(&p, bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn option_values_are_not_misread() {
    // A value that looks like an option is the value.
    assert!(check("sort -t -o in.txt").is_ok());
    assert!(check("sort -k -o in.txt").is_ok());
    assert!(check("git commit -m -x").is_ok());
    assert!(check("git grep -e--exec foo").is_ok());
    // Where a table does not list every option of the program, a value that looks like a refused
    // option is refused (the shadow pass); attached values are unambiguous.
    assert!(check("git grep -e --exec foo").is_err());
    assert!(check("git commit -m --output").is_err());
    // ... and an option hidden in a value of an option that takes none is still seen.
    assert!(check("sort -r -o /tmp/x in.txt").is_err());
    assert!(check("git --no-pager -c core.pager=x log").is_err());
    // After `--` everything is an operand.
    assert!(check("sort -- -o").is_ok());
    assert!(check("git log -- src/main.rs").is_ok());
    // git takes a `--` as an option's value, so the shadow pass looks past it.
    assert!(check("git log -- --output=x").is_err());
}

#[test]
fn violations_name_the_argument_and_the_abbreviated_option() {
    let err = check("git -c core.pager=x status").unwrap_err();
    assert!(err.subject.contains("core.pager"), "{err}");
    assert!(err.to_string().contains("git -c"), "{err}");
    let err = check("sort --compress-prog=x f").unwrap_err();
    assert!(err.to_string().contains("--compress-program"), "{err}");
    let err = check("git rebase --exe=x").unwrap_err();
    assert!(err.to_string().contains("--exec"), "{err}");
    let err = check("git config --glob user.name x").unwrap_err();
    assert!(err.to_string().contains("--global"), "{err}");
}

#[test]
fn paths_are_resolved_from_the_commands_cwd() {
    let w = ws();
    let sub = w.root().join("sub");
    let p = Policy::default();
    let ok = |s: &str| check_argv(&argv(s), &p, &w, &sub);
    assert!(ok("sort -o out.txt in.txt").is_ok());
    assert!(ok("sort -o ../out.txt in.txt").is_ok());
    assert!(ok("sort -o ../../out.txt in.txt").is_err());
    assert!(ok("git init ..").is_ok());
    assert!(ok("git init .").is_err());
    assert!(ok("git -C .. init").is_ok());
}

#[test]
fn every_allowed_git_subcommand_is_a_builtin_of_the_installed_git() {
    // An alias can never shadow a builtin, so allowing only builtins means no alias ever runs.
    let out = std::process::Command::new("git")
        .arg("--list-cmds=builtins")
        .output()
        .expect("git must be installed for the tests");
    let builtins = String::from_utf8_lossy(&out.stdout);
    let builtins: Vec<&str> = builtins.lines().collect();
    for s in git::SUBCOMMANDS {
        assert!(builtins.contains(s), "{s} is not a git builtin");
    }
    for refused in [
        "help",
        "difftool",
        "submodule--helper",
        "clone",
        "worktree",
        "clean",
    ] {
        assert!(!git::SUBCOMMANDS.contains(&refused), "{refused}");
    }
}
