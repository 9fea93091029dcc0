//! `linerate search --html`: the report renders in a real browser (headless
//! Debian chromium) to a PNG that is not blank and shows the plot.

mod util;

use util::bin;

#[test]
fn html_report_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let out = bin()
        .args(["search", "--sim", "ndr=12e6,pdr=12.24e6,plr=0.005", "-q"])
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("<svg") && text.contains("Every trial"));

    let Some(pixels) = util::screenshot(&html, dir.path()) else {
        return;
    };
    let non_white = pixels.iter().filter(|p| **p != [255, 255, 255]).count();
    let share = non_white as f64 / pixels.len() as f64;
    assert!(share > 0.02, "the page is blank: {:.4} non-white", share);
    let colors: std::collections::BTreeSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(colors.len() > 16, "only {} colors", colors.len());
    // The inline plot rendered: its no-loss trial green is on the page.
    let near = |p: &[u8; 3], c: [u8; 3]| (0..3).all(|i| (p[i] as i32 - c[i] as i32).abs() <= 12);
    assert!(
        pixels.iter().any(|p| near(p, [30, 150, 60])),
        "no trial bar in the screenshot"
    );
}
