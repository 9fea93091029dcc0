//! Bad EAL arguments give an error carrying the EAL's own reason, and the
//! EAL then refuses a second attempt in this process with a clear message.
#![cfg(feature = "dpdk")]

use linerate::sys::dpdk::{self, DpdkError};

#[test]
fn bad_vdev_is_an_error_with_the_eal_reason() {
    let prefix = format!("--file-prefix=linerate-test-bad-{}", std::process::id());
    let args = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_no_such_driver0",
        prefix.as_str(),
    ];
    let err = dpdk::init(&args).unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    match &err {
        DpdkError::EalInit {
            errno,
            reason,
            log,
            args,
        } => {
            assert_ne!(*errno, 0);
            assert!(!reason.is_empty());
            assert!(
                log.contains("EAL said"),
                "the EAL's log lines are quoted: {text}"
            );
            assert!(args.contains("net_no_such_driver0"), "{text}");
        }
        other => panic!("expected EalInit, got {other:?}"),
    }
    let again = dpdk::init(&["--no-huge"]).unwrap_err().to_string();
    assert!(
        again.contains("once per process") && again.contains("failed"),
        "{again}"
    );
}
