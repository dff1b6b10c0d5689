use super::*;
use rstest::rstest;

fn parse(text: &str) -> Result<AgentFile, AgentFileError> {
    parse_agent_file(Path::new("/p/.claude/agents/reviewer.md"), text)
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_good_file_gives_every_field() {
    let f = parse(
        "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Grep, Glob\nmodel: m-large\n---\n\nYou review code.\nCarefully.\n",
    )
    .expect("valid");
    assert_eq!(f.name, "reviewer");
    assert_eq!(f.description, "Reviews code");
    assert_eq!(f.tools, Some(strs(&["Read", "Grep", "Glob"])));
    assert_eq!(f.model.as_deref(), Some("m-large"));
    assert_eq!(f.system_prompt, "You review code.\nCarefully.");
    let r = f.route();
    assert_eq!(r.model.as_deref(), Some("m-large"));
    assert_eq!(
        r.system_prompt.as_deref(),
        Some("You review code.\nCarefully.")
    );
    assert_eq!(
        r.defined_at.as_deref(),
        Some("/p/.claude/agents/reviewer.md")
    );
    assert!(f.notes().is_empty());
}

#[rstest]
#[case::string("tools: Read, Grep", Some(&["Read", "Grep"][..]))]
#[case::string_no_spaces("tools: Read,Grep,", Some(&["Read", "Grep"][..]))]
#[case::flow_list("tools: [Read, Grep]", Some(&["Read", "Grep"][..]))]
#[case::block_list("tools:\n  - Read\n  - Bash(git log:*)", Some(&["Read", "Bash(git log:*)"][..]))]
#[case::quoted("tools: \"Read, Write\"", Some(&["Read", "Write"][..]))]
#[case::absent("", None)]
#[case::null("tools:", None)]
#[case::empty_string("tools: ''", None)]
#[case::star("tools: '*'", None)]
#[case::empty_list("tools: []", Some(&[][..]))]
fn tools_are_a_string_or_a_list(#[case] line: &str, #[case] want: Option<&[&str]>) {
    let f = parse(&format!(
        "---\nname: r\ndescription: d\n{line}\n---\nbody\n"
    ))
    .expect("valid");
    assert_eq!(f.tools, want.map(strs), "{line}");
}

#[test]
fn disallowed_tools_take_both_shapes() {
    let f = parse("---\nname: r\ndescription: d\ndisallowedTools: [Write, Edit]\n---\n")
        .expect("valid");
    assert_eq!(f.disallowed_tools, strs(&["Write", "Edit"]));
    assert_eq!(f.route().disallowed_tools, strs(&["Write", "Edit"]));
    let f = parse("---\nname: r\ndescription: d\ndisallowedTools: Write\n---\n").expect("valid");
    assert_eq!(f.disallowed_tools, strs(&["Write"]));
}

#[test]
fn crlf_and_a_bom_are_read_like_lf() {
    let f = parse("\u{feff}---\r\nname: reviewer\r\ndescription: Reviews\r\n---\r\nLine one.\r\nLine two.\r\n")
        .expect("valid");
    assert_eq!(f.name, "reviewer");
    assert_eq!(f.description, "Reviews");
    assert_eq!(f.system_prompt, "Line one.\nLine two.");
}

#[rstest]
#[case::inherit("inherit", None, false)]
#[case::sonnet("sonnet", None, true)]
#[case::opus("opus", None, true)]
#[case::haiku("haiku", None, true)]
#[case::model_id("deepseek-reasoner", Some("deepseek-reasoner"), false)]
#[case::claude_id("claude-sonnet-4-5", Some("claude-sonnet-4-5"), false)]
fn models(#[case] model: &str, #[case] routed: Option<&str>, #[case] noted: bool) {
    let f = parse(&format!(
        "---\nname: r\ndescription: d\nmodel: {model}\n---\n"
    ))
    .expect("valid");
    assert_eq!(f.model.as_deref(), Some(model));
    assert_eq!(f.route().model.as_deref(), routed);
    assert_eq!(
        f.notes().iter().any(|n| n.contains("Claude Code model")),
        noted
    );
}

#[test]
fn unknown_fields_are_accepted_and_named() {
    let f = parse(
        "---\nname: r\ndescription: d\ncolor: blue\npermissionMode: plan\nhooks:\n  a: 1\n---\nbody\n",
    )
    .expect("valid");
    assert_eq!(
        f.ignored_fields,
        strs(&["color", "permissionMode", "hooks"])
    );
    assert_eq!(
        f.notes(),
        vec!["ignored fields: color, permissionMode, hooks"]
    );
}

#[rstest]
#[case::no_front_matter("You are a reviewer.\n", Some(1), "reviewer", &["no front matter", "`---`"])]
#[case::empty_file("", Some(1), "reviewer", &["no front matter"])]
#[case::unclosed("---\nname: x\ndescription: d\nbody\n", Some(1), "reviewer", &["not closed", "`---`"])]
#[case::missing_name("---\ndescription: d\n---\nbody\n", Some(2), "reviewer", &["no `name`", "name: <type name>"])]
#[case::empty_name("---\nname: ''\ndescription: d\n---\n", Some(2), "reviewer", &["`name` must be a non-empty string"])]
#[case::list_name("---\ndescription: d\nname: [a, b]\n---\n", Some(3), "reviewer", &["`name` must be"])]
#[case::missing_description("---\nname: rev\n---\nbody\n", Some(2), "rev", &["no `description`", "Claude Code requires it"])]
#[case::bad_yaml("---\nname: rev\ndescription: d\ntools: [Read, Grep\n---\nbody\n", Some(5), "rev", &["not valid YAML", "column"])]
#[case::unterminated_quote("---\nname: rev\ndescription: \"unterminated\n---\n", Some(3), "rev", &["not valid YAML"])]
#[case::not_a_mapping("---\n- a\n- b\n---\n", Some(2), "reviewer", &["not a mapping"])]
#[case::empty_front_matter("---\n---\nbody\n", Some(2), "reviewer", &["not a mapping"])]
#[case::tools_number("---\nname: rev\ndescription: d\ntools:\n  a: b\n---\n", Some(5), "rev", &["`tools` must be"])]
#[case::model_list("---\nname: rev\ndescription: d\nmodel: [a]\n---\n", Some(4), "rev", &["`model` must be a string"])]
#[case::too_deep("---\nname: rev\ndescription: d\nx: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n---\n", Some(4), "rev", &["nests"])]
fn broken_files_name_path_line_and_fix(
    #[case] text: &str,
    #[case] line: Option<usize>,
    #[case] type_name: &str,
    #[case] mentions: &[&str],
) {
    let e = parse(text).expect_err("broken");
    assert_eq!(e.line, line, "{e}");
    assert_eq!(e.type_name.as_deref(), Some(type_name), "{e}");
    let shown = e.to_string();
    let at = match line {
        Some(l) => format!("/p/.claude/agents/reviewer.md:{l}: "),
        None => "/p/.claude/agents/reviewer.md: ".into(),
    };
    assert!(shown.starts_with(&at), "{shown}");
    for m in mentions {
        assert!(shown.contains(m), "{m:?} missing from: {shown}");
    }
}

#[test]
fn front_matter_is_bounded() {
    let big = format!(
        "---\nname: r\ndescription: d\nx: \"{}\"\n---\n",
        "a".repeat(FRONT_MATTER_LIMIT)
    );
    let e = parse(&big).expect_err("too big");
    assert!(e.message.contains("front matter is over"), "{e}");
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

#[test]
fn a_directory_reads_md_files_only_and_bounds_each() {
    let d = tempfile::tempdir().expect("tempdir");
    write(
        d.path(),
        "b.md",
        "---\nname: b\ndescription: B\n---\nbe b\n",
    );
    write(
        d.path(),
        "a.md",
        "---\nname: a\ndescription: A\n---\nbe a\n",
    );
    write(d.path(), "notes.txt", "not an agent");
    write(d.path(), "README", "not an agent");
    std::fs::create_dir(d.path().join("dir.md")).expect("mkdir");
    // Oversized: refused without being read whole.
    let big = std::fs::File::create(d.path().join("huge.md")).expect("create");
    big.set_len(AGENT_FILE_LIMIT + 10).expect("set_len");
    // A FIFO named like an agent file: refused at once, never a hang.
    nix::unistd::mkfifo(&d.path().join("fifo.md"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let got = load_agent_dir(d.path());
    let summary: Vec<String> = got
        .iter()
        .map(|r| match r {
            Ok(f) => format!("ok {}", f.name),
            Err(e) => format!(
                "err {} {}",
                e.type_name.as_deref().unwrap_or("-"),
                e.message
            ),
        })
        .collect();
    assert_eq!(summary.len(), 4, "{summary:?}");
    assert_eq!(summary[0], "ok a");
    assert_eq!(summary[1], "ok b");
    assert!(
        summary[2].starts_with("err fifo cannot read: not a regular file (it is a FIFO)"),
        "{summary:?}"
    );
    assert!(
        summary[3].starts_with("err huge cannot read: over 1048576 bytes"),
        "{summary:?}"
    );
    assert!(load_agent_dir(&d.path().join("missing")).is_empty());
}

#[test]
fn precedence_is_config_then_project_then_user_then_builtin() {
    let project = tempfile::tempdir().expect("tempdir");
    let user = tempfile::tempdir().expect("tempdir");
    write(
        project.path(),
        "rev.md",
        "---\nname: reviewer\ndescription: project reviewer\n---\nproject\n",
    );
    write(
        user.path(),
        "rev.md",
        "---\nname: reviewer\ndescription: user reviewer\n---\nuser\n",
    );
    write(
        user.path(),
        "explore.md",
        "---\nname: Explore\ndescription: my explorer\n---\nmine\n",
    );
    write(
        user.path(),
        "only.md",
        "---\nname: only-user\ndescription: u\n---\nu\n",
    );
    write(
        project.path(),
        "broken.md",
        "---\nname: planner\ndescription: [\n---\n",
    );
    write(
        user.path(),
        "planner.md",
        "---\nname: planner\ndescription: ok\n---\nok\n",
    );
    let config = Config::parse(
        Path::new("/p/dsh.toml"),
        "[agent_types.only-user]\nsystem_prompt = \"from toml\"\n",
    )
    .expect("config");
    let t = AgentTypes::resolve(&config, &[project.path().into(), user.path().into()]);
    let prompt = |n: &str| {
        t.get(n)
            .and_then(|d| d.route.as_ref().ok())
            .and_then(|r| r.system_prompt.clone())
    };
    assert_eq!(prompt("reviewer").as_deref(), Some("project"));
    assert_eq!(prompt("Explore").as_deref(), Some("mine"));
    assert_eq!(prompt("only-user").as_deref(), Some("from toml"));
    assert_eq!(
        t.get("only-user").map(|d| d.source.to_string()).as_deref(),
        Some("/p/dsh.toml:1")
    );
    assert!(prompt("Plan").is_some(), "built-in stays");
    // A broken project file hides the user's good one: the call fails.
    let planner = t.get("planner").expect("planner");
    let err = planner.route.as_ref().expect_err("broken").to_string();
    assert!(
        err.contains("broken.md:4: the front matter is not valid YAML"),
        "{err}"
    );
    let shadowed: Vec<(String, String)> = t
        .shadowed
        .iter()
        .map(|(d, by)| (d.name.clone(), by.to_string()))
        .collect();
    assert!(
        shadowed.contains(&(
            "Explore".into(),
            user.path().join("explore.md").display().to_string()
        )),
        "{shadowed:?}"
    );
    assert!(
        shadowed.contains(&(
            "reviewer".into(),
            project.path().join("rev.md").display().to_string()
        )),
        "{shadowed:?}"
    );
    assert!(
        shadowed.contains(&("only-user".into(), "/p/dsh.toml:1".into())),
        "{shadowed:?}"
    );
    assert!(
        shadowed.contains(&(
            "planner".into(),
            project.path().join("broken.md").display().to_string()
        )),
        "{shadowed:?}"
    );
}

#[test]
fn the_same_directory_twice_is_read_once() {
    let d = tempfile::tempdir().expect("tempdir");
    write(
        d.path(),
        "a.md",
        "---\nname: a\ndescription: A\n---\nbe a\n",
    );
    let t = AgentTypes::resolve(&Config::builtin(), &[d.path().into(), d.path().into()]);
    assert!(t.get("a").is_some());
    assert!(t.shadowed.is_empty(), "{:?}", t.shadowed);
}

#[test]
fn builtins_explore_and_plan_are_read_only() {
    let t = AgentTypes::from_config(&Config::builtin());
    for name in ["Explore", "Plan"] {
        let r = t.get(name).and_then(|d| d.route.clone().ok()).expect(name);
        assert_eq!(r.tools, Some(strs(&["Read", "Grep", "Glob"])), "{name}");
    }
    let g = t
        .get("general-purpose")
        .and_then(|d| d.route.clone().ok())
        .expect("gp");
    assert_eq!(g.tools, None);
}

/// Claude Code reads a one-line value whole, `: ` in it included (real
/// agent files have `description: … the FLOOR PRODUCER: per triage.md …`);
/// strict YAML refuses that, so such lines are read as Claude Code reads
/// them, with a note.
#[rstest]
#[case::colon_in_description(
    "---\nname: docs-author\ndescription: Writes docs. THE PRODUCER: per triage.md (floor_only: true), it's it\ntools: Read, Write\nmodel: sonnet\n---\nYou write docs.\n",
    "Writes docs. THE PRODUCER: per triage.md (floor_only: true), it's it"
)]
#[case::colon_and_list_after(
    "---\nname: docs-author\ndescription: Dual-use: also for bugs\ntools:\n  - Read\n  - Grep\n---\nbody\n",
    "Dual-use: also for bugs"
)]
fn a_value_with_a_colon_is_read_whole_as_claude_code_does(
    #[case] text: &str,
    #[case] description: &str,
) {
    let f = parse(text).expect("read like Claude Code");
    assert_eq!(f.name, "docs-author");
    assert_eq!(f.description, description);
    assert_eq!(f.front_matter, FrontMatter::LineValues);
    assert!(
        f.tools.as_ref().is_some_and(|t| t.len() == 2),
        "{:?}",
        f.tools
    );
    assert!(
        f.notes().iter().any(|n| n.contains("not valid YAML")),
        "{:?}",
        f.notes()
    );
}

/// An agent file that is a link out of the directory holding `.claude/`
/// (a model with Bash can plant one) is refused unread; a link inside is
/// followed.
#[test]
fn an_agent_file_linked_out_of_the_project_is_refused_unread() {
    let root = tempfile::tempdir().expect("tempdir");
    let secret = root.path().join("secret.md");
    std::fs::write(
        &secret,
        "---\nname: leak\ndescription: hunter2\n---\npassword hunter2\n",
    )
    .expect("secret");
    let agents = root.path().join("proj/.claude/agents");
    std::fs::create_dir_all(&agents).expect("mkdir");
    std::os::unix::fs::symlink(&secret, agents.join("leak.md")).expect("symlink");
    std::fs::create_dir_all(root.path().join("proj/docs")).expect("mkdir");
    write(
        &root.path().join("proj/docs"),
        "inside.md",
        "---\nname: inside\ndescription: I\n---\nbe inside\n",
    );
    std::os::unix::fs::symlink(
        root.path().join("proj/docs/inside.md"),
        agents.join("inside.md"),
    )
    .expect("symlink");
    let got = load_agent_dir(&agents);
    assert_eq!(got.len(), 2);
    match &got[0] {
        Ok(f) => assert_eq!(f.name, "inside"),
        Err(e) => panic!("{e}"),
    }
    let e = got[1].as_ref().expect_err("refused");
    assert_eq!(e.type_name.as_deref(), Some("leak"));
    assert!(e.message.contains("a symlink to"), "{}", e.message);
    assert!(!e.to_string().contains("hunter2"), "{e}");
}
