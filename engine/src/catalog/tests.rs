use std::fs;

use rstest::rstest;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    fs::create_dir_all(dir).expect("mkdir");
    let p = dir.join(name);
    fs::write(&p, text).expect("write");
    p
}

fn meta(name: &str) -> String {
    format!("export const meta = {{ name: {name:?}, description: \"d\" }};\nreturn 1;\n")
}

#[test]
fn names_come_from_meta_and_the_first_directory_wins() {
    let root = tempfile::tempdir().expect("tempdir");
    let project = root.path().join("proj");
    let home = root.path().join("home");
    write(&project.join(".claude/workflows"), "a.js", &meta("review"));
    write(&home.join(".claude/workflows"), "b.ts", &meta("review"));
    write(&home.join(".claude/workflows"), "c.js", &meta("triage"));
    write(&home.join(".claude/workflows"), "notes.md", "not a script");
    let c = Catalog::standard(&project, Some(&home), None);
    let list = c.list();
    let names: Vec<(&str, bool)> = list
        .iter()
        .map(|e| (e.name.as_str(), e.shadowed_by.is_some()))
        .collect();
    assert_eq!(
        names,
        [("review", false), ("review", true), ("triage", false)]
    );
    let found = c.find("review").expect("found");
    assert_eq!(found.origin, Origin::Project);
    assert!(
        c.find("a").is_none(),
        "a file stem is not a name when the file has meta"
    );
}

#[test]
fn a_broken_file_is_known_by_its_stem_and_its_load_names_the_file() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join(".claude/workflows");
    write(
        &dir,
        "bad.js",
        "export const meta = { name: \"bad\", description: \"d\" };\nconst x = ;\n",
    );
    let c = Catalog::standard(root.path(), None, None);
    let e = c.find("bad").expect("listed by stem");
    assert!(e.problem.is_some());
    let err = c
        .load(&WorkflowTarget::Name("bad".into()))
        .expect_err("parse error");
    assert_eq!(err.code, ErrorCode::ScriptParse);
    assert!(
        err.message.starts_with("workflow('bad'): "),
        "{}",
        err.message
    );
    assert!(
        err.message.contains(".claude/workflows/bad.js:2:"),
        "{}",
        err.message
    );
}

#[rstest]
#[case::unknown_name(WorkflowTarget::Name("nope".into()), ErrorCode::InvalidArgument, "no saved workflow has that name; known: good")]
#[case::missing_file(WorkflowTarget::ScriptPath("missing.js".into()), ErrorCode::InvalidArgument, "cannot read the script")]
#[case::not_a_script(WorkflowTarget::ScriptPath("notes.txt".into()), ErrorCode::InvalidArgument, "must end in .ts, .mts, .js or .mjs")]
#[case::empty_path(
    WorkflowTarget::ScriptPath(String::new()),
    ErrorCode::InvalidArgument,
    "the path is empty"
)]
#[case::no_meta(WorkflowTarget::ScriptPath("plain.js".into()), ErrorCode::MetaInvalid, "has no `export const meta")]
fn failed_loads_say_what_and_where(
    #[case] target: WorkflowTarget,
    #[case] code: ErrorCode,
    #[case] needle: &str,
) {
    let root = tempfile::tempdir().expect("tempdir");
    write(
        &root.path().join(".claude/workflows"),
        "good.js",
        &meta("good"),
    );
    write(root.path(), "notes.txt", "x");
    write(root.path(), "plain.js", "return 1;\n");
    let c = Catalog::standard(root.path(), None, None);
    let err = c.load(&target).expect_err("refused");
    assert_eq!(err.code, code, "{}", err.message);
    assert!(err.message.contains(needle), "{}", err.message);
}

#[test]
fn a_loaded_child_is_a_function_of_its_hooks_with_its_lines_kept() {
    let root = tempfile::tempdir().expect("tempdir");
    write(
        &root.path().join("sub"),
        "child.ts",
        "export const meta = { name: \"kid\", description: \"d\" };\nconst n: number = 1;\nreturn n;\n",
    );
    let c = Catalog::standard(root.path(), None, None);
    let loaded = c
        .load(&WorkflowTarget::ScriptPath("sub/child.ts".into()))
        .expect("loads");
    assert_eq!(loaded.wire.name, "kid");
    assert_eq!(loaded.wire.script_name, "sub/child.ts");
    let js = &loaded.wire.script_js;
    assert!(
        js.starts_with(
            "(function (agent, phase, log, console, workflow, args) { return (async function () {\n"
        ),
        "{js}"
    );
    assert!(js.ends_with("}); })"), "{js}");
    assert!(!js.contains(": number"), "types stripped: {js}");
}

/// A project with a secret outside it: `root/secret.txt`, and the project
/// `root/proj`.
fn project_with_a_secret_outside() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let secret = write(root.path(), "secret.txt", "password = hunter2 oops\n");
    let project = root.path().join("proj");
    fs::create_dir_all(project.join(".claude/workflows")).expect("mkdir");
    (root, project, secret)
}

/// A symlink planted in the project (a model with Bash can make one to a
/// file its sandbox cannot read) is not followed out of the project, and
/// the file's text never reaches the rejection.
#[rstest]
#[case::script_path("creds.ts", WorkflowTarget::ScriptPath("creds.ts".into()))]
#[case::saved_workflow(".claude/workflows/creds.ts", WorkflowTarget::Name("creds".into()))]
fn a_symlink_out_of_the_project_is_not_followed(
    #[case] link: &str,
    #[case] target: WorkflowTarget,
) {
    let (_root, project, secret) = project_with_a_secret_outside();
    std::os::unix::fs::symlink(&secret, project.join(link)).expect("symlink");
    let c = Catalog::standard(&project, None, None);
    let err = c.load(&target).expect_err("refused");
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{}", err.message);
    assert!(
        err.message.contains("outside the project"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("hunter2"), "{}", err.message);
    for e in c.list() {
        let problem = e.problem.unwrap_or_default();
        assert!(!problem.contains("hunter2"), "{problem}");
        assert!(
            c.refusal(&c.find(&e.name).expect("found")).is_some(),
            "{}",
            e.name
        );
    }
}

/// A link that stays inside the project is followed as before.
#[test]
fn a_symlink_inside_the_project_is_followed() {
    let (_root, project, _) = project_with_a_secret_outside();
    write(&project.join("sub"), "child.ts", &meta("kid"));
    std::os::unix::fs::symlink(project.join("sub/child.ts"), project.join("kid.ts"))
        .expect("symlink");
    std::os::unix::fs::symlink(
        project.join("sub/child.ts"),
        project.join(".claude/workflows/kid.ts"),
    )
    .expect("symlink");
    let c = Catalog::standard(&project, None, None);
    let by_path = c
        .load(&WorkflowTarget::ScriptPath("kid.ts".into()))
        .expect("loads");
    assert_eq!(by_path.wire.name, "kid");
    let entry = c.find("kid").expect("listed");
    assert!(entry.problem.is_none(), "{:?}", entry.problem);
    assert!(c.refusal(&entry).is_none());
    c.load(&WorkflowTarget::Name("kid".into())).expect("loads");
}

/// A file outside the project named by its own path is still read (as
/// documented), but a parse error names its place without its text.
#[test]
fn a_file_named_outside_the_project_is_not_quoted() {
    let (root, project, _) = project_with_a_secret_outside();
    let outside = write(
        root.path(),
        "other.ts",
        "export const meta = { name: \"o\", description: \"d\" };\nconst password = hunter2 oops;\n",
    );
    let c = Catalog::standard(&project, None, None);
    for given in [outside.display().to_string(), "../other.ts".to_string()] {
        let err = c
            .load(&WorkflowTarget::ScriptPath(given.clone()))
            .expect_err("parse error");
        assert_eq!(err.code, ErrorCode::ScriptParse, "{}", err.message);
        assert!(err.message.contains("other.ts:2:"), "{}", err.message);
        assert!(!err.message.contains("hunter2"), "{given}: {}", err.message);
    }
    // Inside the project the failing line is shown, as before.
    write(&project, "bad.ts", "const password = hunter2 oops;\n");
    let err = c
        .load(&WorkflowTarget::ScriptPath("bad.ts".into()))
        .expect_err("parse error");
    assert!(err.message.contains("hunter2 oops"), "{}", err.message);
}
