//! Bad encapsulation keys give exit status 2 and a message at the key (file,
//! line, key and reason), in the style of tests/bad_input.rs.

mod util;

const TAIL: &str = r#"
[port.wire]
kind = "mem"

[stage.ana]
kind = "analyzer"
rx = "wire"
"#;

/// `linerate check` on a generator with `keys` (and an analyzer with
/// `ana`): exit 2, stderr naming the file and holding every one of `parts`.
fn refused(name: &str, keys: &str, ana: &str, parts: &[&str]) {
    let text = format!("[stage.gen]\nkind = \"generator\"\ntx = \"wire\"\n{keys}\n{TAIL}{ana}\n");
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), name, &text);
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{name}: stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for p in [name].iter().chain(parts) {
        assert!(stderr.contains(p), "{name}: missing `{p}` in:\n{stderr}");
    }
}

#[test]
fn vlan_ids_above_4095_are_refused() {
    refused(
        "vid.toml",
        "vlan = 4096",
        "",
        &["vid.toml:4:", "`vlan`", "4096"],
    );
    refused(
        "vrange.toml",
        "vlan = \"4000-4096\"",
        "",
        &["vrange.toml:4:", "VLAN id 4096 is above 4095"],
    );
    refused(
        "vback.toml",
        "vlan = \"9-3\"",
        "",
        &["not a VLAN id or range"],
    );
    refused(
        "qid.toml",
        "qinq = [100, 5000]",
        "",
        &["qid.toml:4:", "`qinq`", "VLAN id 5000 is out of range"],
    );
}

#[test]
fn qinq_needs_two_tags() {
    refused(
        "q1.toml",
        "qinq = [100]",
        "",
        &["q1.toml:4:", "`qinq`", "two VLAN ids", "not 1 value(s)"],
    );
    refused("q3.toml", "qinq = [1, 2, 3]", "", &["not 3 value(s)"]);
}

#[test]
fn mpls_labels_of_21_bits_are_refused() {
    refused(
        "label.toml",
        "mpls = [16, 1048576]",
        "",
        &[
            "label.toml:4:",
            "`mpls`",
            "MPLS label 1048576 is out of range",
        ],
    );
    refused(
        "nolabel.toml",
        "mpls = []",
        "",
        &["`mpls`", "1 to 8 labels"],
    );
    refused(
        "ninelabels.toml",
        "mpls = [1, 2, 3, 4, 5, 6, 7, 8, 9]",
        "",
        &["not 9 value(s)"],
    );
}

#[test]
fn vnis_of_25_bits_and_bad_tunnel_ends_are_refused() {
    refused(
        "vni.toml",
        "vxlan = { vni = 16777216, src = \"10.9.0.1\", dst = \"10.9.0.2\" }",
        "",
        &["vni.toml:4:", "`vni`", "VNI 16777216 is out of range"],
    );
    refused(
        "vnisrc.toml",
        "vxlan = { vni = 1, src = \"fd00::1\", dst = \"10.9.0.2\" }",
        "",
        &["`src`", "not an IPv4 address"],
    );
    refused(
        "vnidst.toml",
        "vxlan = { vni = 1, src = \"10.9.0.1\" }",
        "",
        &["`dst`", "is required"],
    );
    refused(
        "vnikey.toml",
        "vxlan = { vni = 1, src = \"10.9.0.1\", dst = \"10.9.0.2\", ttl = 3 }",
        "",
        &["`ttl`", "unknown key"],
    );
}

#[test]
fn frames_too_small_for_the_headers_are_refused_at_the_key() {
    refused(
        "small.toml",
        "vlan = 7\nframe = 64",
        "",
        &[
            "small.toml:5:",
            "`frame`",
            "64-byte frame is too small",
            "from 68",
        ],
    );
    refused(
        "smallvx.toml",
        "vxlan = { vni = 1, src = \"10.9.0.1\", dst = \"10.9.0.2\" }\nframe = 100",
        "",
        &["`frame`", "100-byte frame is too small", "from 114"],
    );
    refused(
        "smallimix.toml",
        "mpls = [16, 17]\nframe = \"imix\"\nimix = \"64:1,1518:1\"",
        "",
        &["`imix`", "64-byte frame is too small", "from 72"],
    );
}

#[test]
fn two_encapsulations_and_unknown_expectations_are_refused() {
    refused(
        "two.toml",
        "vlan = 7\nmpls = [16]",
        "",
        &["two.toml:5:", "`mpls` and `vlan` both wrap the frames"],
    );
    refused(
        "expect.toml",
        "",
        "expect = \"gre\"",
        &["`expect`", "unknown encapsulation `gre`"],
    );
}
