//! `linerate search --html`: the report renders in a real browser (headless
//! Debian chromium) to a PNG that is not blank and shows the plot.

mod util;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::bin;

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

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

    let Some(chromium) = which("chromium") else {
        assert!(
            std::env::var_os("LINERATE_REQUIRE_PEERS").is_none(),
            "chromium is not installed (scripts/test installs Debian's `chromium`)"
        );
        eprintln!("skipped: chromium is not installed");
        return;
    };
    let png = dir.path().join("report.png");
    let profile = dir.path().join("profile");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1300,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish the screenshot in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium: {status}");

    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.line_size / info.width as usize;
    assert!(bpp >= 3, "{info:?}");
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(bpp).collect();
    let non_white = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    let share = non_white as f64 / pixels.len() as f64;
    assert!(share > 0.02, "the page is blank: {:.4} non-white", share);
    let colors: std::collections::BTreeSet<[u8; 3]> =
        pixels.iter().map(|p| [p[0], p[1], p[2]]).collect();
    assert!(colors.len() > 16, "only {} colors", colors.len());
    // The inline plot rendered: its no-loss trial green is on the page.
    let near = |p: &[u8], c: [u8; 3]| (0..3).all(|i| (p[i] as i32 - c[i] as i32).abs() <= 12);
    assert!(
        pixels.iter().any(|p| near(p, [30, 150, 60])),
        "no trial bar in the screenshot"
    );
}
