//! ibverbs without hardware: the device list is read through the real
//! libibverbs, and opening a device either fails with the clear
//! "no RDMA device found" error (machines without RDMA, like CI) or, where a
//! device exists, a bogus name fails naming the devices present.
#![cfg(feature = "ibverbs")]

use linerate::sys::ibverbs::{self, IbvError};

#[test]
fn open_without_a_device_is_a_clear_error() {
    let names = ibverbs::device_names().expect("ibv_get_device_list");
    if names.is_empty() {
        let err = ibverbs::open(None).unwrap_err();
        assert!(matches!(err, IbvError::NoDevice), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("no RDMA device found"), "{text}");
        assert!(
            text.contains("ibv_get_device_list returned 0 devices"),
            "{text}"
        );
        assert!(text.contains("/sys/class/infiniband"), "{text}");
        println!("exercised: no RDMA device present; open() -> {text}");
    } else {
        let err = ibverbs::open(Some("linerate-no-such-device")).unwrap_err();
        assert!(matches!(err, IbvError::NoSuchDevice { .. }), "{err:?}");
        assert!(err.to_string().contains(&names[0]), "{err}");
        println!("exercised: RDMA devices {names:?} present; a bogus name -> {err}");
    }
}
