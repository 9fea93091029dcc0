//! Build script. The DPDK and ibverbs bindings are generated here when their
//! cargo features are on; the default build needs no system library.
//!
//! Feature `dpdk`: pkg-config `libdpdk` (>= 22.11), bindgen over the EAL,
//! mempool, mbuf, ethdev and ring headers (through `src/sys/dpdk_shim.h`), and
//! the C shim `src/sys/dpdk_shim.c` for DPDK's static-inline fast-path
//! functions, compiled with `cc`. Both bindgen and cc get the FULL output of
//! `pkg-config --cflags libdpdk`: it carries `-include rte_config.h` and
//! `-march=...`, without which the inline bodies and struct layouts would not
//! match the DPDK build. Feature `ibverbs`: the same over
//! `<infiniband/verbs.h>` with `src/sys/ibverbs_shim.c`.
//!
//! Why a hand-written shim and not bindgen's `wrap_static_fns`: both produce
//! the same thing at run time (an out-of-line C function per inline, called
//! through the PLT-free static archive), so the call cost is identical. The
//! hand-written shim is ~25 reviewed one-liners, while `wrap_static_fns` needs
//! bindgen's `experimental` feature and wraps every static inline reachable
//! from the headers (hundreds, compiled on every build). The per-packet mbuf
//! accessors do not go through the shim at all: Rust reads `data_off`,
//! `data_len`, `pkt_len`, `buf_len` from the bindgen struct and inlines them
//! (measured: docs/src/design/fast-path-costs.md, "The C shim").

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk::build();
    #[cfg(feature = "ibverbs")]
    ibverbs::build();
}

/// Runs `pkg-config --cflags PKG` and splits the output into arguments.
#[cfg(any(feature = "dpdk", feature = "ibverbs"))]
fn full_cflags(pkg: &str) -> Vec<String> {
    let exe = std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = std::process::Command::new(&exe)
        .args(["--cflags", pkg])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Runs bindgen, turning its panic when libclang cannot be loaded into the
/// one clear error of [`fail`].
#[cfg(any(feature = "dpdk", feature = "ibverbs"))]
fn generate(feature: &str, packages: &str, b: bindgen::Builder) -> bindgen::Bindings {
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.generate()));
    let _ = std::panic::take_hook();
    match r {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(
            feature,
            "the system headers",
            &format!("bindgen failed: {e}"),
            packages,
        ),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            fail(feature, "libclang (for bindgen)", &msg, packages)
        }
    }
}

/// Prints one clear error and stops the build.
#[cfg(any(feature = "dpdk", feature = "ibverbs"))]
fn fail(feature: &str, what: &str, detail: &str, packages: &str) -> ! {
    eprintln!();
    eprintln!("error: cargo feature `{feature}` needs {what}, which was not found: {detail}");
    eprintln!("  install it with: apt-get install -y {packages}");
    eprintln!(
        "  (or build without `--features {feature}`; the default build needs no system library)"
    );
    eprintln!();
    std::process::exit(1);
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::path::PathBuf;

    const PACKAGES: &str = "dpdk dpdk-dev libdpdk-dev clang libclang-dev pkg-config";

    pub fn build() {
        println!("cargo:rerun-if-changed=src/sys/dpdk_shim.c");
        println!("cargo:rerun-if-changed=src/sys/dpdk_shim.h");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG");
        // Probe without emitting link lines yet: the static shim must come
        // first on the link line, before the DPDK shared libraries it uses,
        // or `--as-needed` drops them.
        let lib = match pkg_config::Config::new()
            .atleast_version("22.11")
            .cargo_metadata(false)
            .probe("libdpdk")
        {
            Ok(lib) => lib,
            Err(e) => super::fail(
                "dpdk",
                "DPDK >= 22.11 (pkg-config package `libdpdk`)",
                &e.to_string().replace('\n', " "),
                PACKAGES,
            ),
        };
        let cflags = super::full_cflags("libdpdk");
        println!("cargo:rustc-env=LINERATE_DPDK_PKG_VERSION={}", lib.version);

        let mut cc = cc::Build::new();
        cc.file("src/sys/dpdk_shim.c")
            .include("src/sys")
            .opt_level(3)
            .warnings(false)
            .flag_if_supported("-Wno-deprecated-declarations")
            // The shim is linked into executables, never a dlopen'ed library,
            // so DPDK's per-lcore TLS (rte_lcore_id in every mempool get/put)
            // can use the initial-exec model instead of a __tls_get_addr call.
            .flag("-ftls-model=initial-exec");
        for f in &cflags {
            cc.flag(f);
        }
        cc.compile("linerate_dpdk_shim");

        // Now the DPDK libraries, after the shim. Only the ones linerate
        // calls; PMDs (net_null, net_ring, net_memif, ...) are plugins that
        // the EAL dlopens from its plugin directory at rte_eal_init.
        for p in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", p.display());
        }
        for l in [
            "rte_ethdev",
            "rte_mbuf",
            "rte_mempool",
            "rte_ring",
            "rte_eal",
            "rte_kvargs",
        ] {
            if lib.libs.iter().any(|x| x == l) {
                println!("cargo:rustc-link-lib=dylib={l}");
            }
        }

        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
        let bindings = bindgen::Builder::default()
            .header("src/sys/dpdk_shim.h")
            .clang_args(cflags.iter().map(String::as_str))
            .clang_arg("-Isrc/sys")
            .allowlist_function(
                "lr_.*|rte_eal_init|rte_eal_cleanup|rte_eal_process_type|rte_strerror|\
                 rte_thread_register|rte_thread_unregister|rte_eal_has_hugepages|rte_socket_id|rte_lcore_count|\
                 rte_get_main_lcore|rte_version|rte_pktmbuf_pool_create|rte_mempool_free|\
                 rte_mempool_avail_count|rte_mempool_in_use_count|rte_mempool_lookup|\
                 rte_pktmbuf_free_bulk|rte_eth_.*|rte_ring_create|rte_ring_free|\
                 rte_eal_hotplug_add|rte_eal_hotplug_remove",
            )
            .allowlist_type("lr_consts|rte_mbuf|rte_mempool|rte_eth_.*|rte_ether_addr|rte_ring")
            .allowlist_var(
                "LR_.*|rte_eth_fp_ops|SOCKET_ID_ANY|LCORE_ID_ANY|RTE_ETH_LINK_.*|\
                 RTE_ETH_SPEED_NUM_.*|RTE_ETH_MQ_.*",
            )
            .prepend_enum_name(false)
            .derive_default(true)
            .derive_debug(false)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        super::generate("dpdk", PACKAGES, bindings)
            .write_to_file(out.join("dpdk_bindings.rs"))
            .expect("write dpdk_bindings.rs to OUT_DIR");
    }
}

#[cfg(feature = "ibverbs")]
mod ibverbs {
    use std::path::PathBuf;

    const PACKAGES: &str = "libibverbs-dev clang libclang-dev pkg-config";

    pub fn build() {
        println!("cargo:rerun-if-changed=src/sys/ibverbs_shim.c");
        println!("cargo:rerun-if-changed=src/sys/ibverbs_shim.h");
        let lib = match pkg_config::Config::new()
            .cargo_metadata(false)
            .probe("libibverbs")
        {
            Ok(lib) => lib,
            Err(e) => super::fail(
                "ibverbs",
                "rdma-core's libibverbs (pkg-config package `libibverbs`)",
                &e.to_string().replace('\n', " "),
                PACKAGES,
            ),
        };
        let cflags = super::full_cflags("libibverbs");
        let mut cc = cc::Build::new();
        cc.file("src/sys/ibverbs_shim.c")
            .include("src/sys")
            .opt_level(3)
            .warnings(false);
        for f in &cflags {
            cc.flag(f);
        }
        cc.compile("linerate_ibverbs_shim");
        for p in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", p.display());
        }
        println!("cargo:rustc-link-lib=dylib=ibverbs");

        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
        let bindings = bindgen::Builder::default()
            .header("src/sys/ibverbs_shim.h")
            .clang_args(cflags.iter().map(String::as_str))
            .clang_arg("-Isrc/sys")
            .allowlist_function(
                "lr_ibv_.*|ibv_get_device_list|ibv_free_device_list|ibv_get_device_name|\
                 ibv_open_device|ibv_close_device|ibv_alloc_pd|ibv_dealloc_pd|ibv_reg_mr|\
                 ibv_dereg_mr|ibv_create_cq|ibv_destroy_cq|ibv_create_qp|ibv_destroy_qp|\
                 ibv_modify_qp|ibv_query_device|ibv_wc_status_str",
            )
            .allowlist_type("ibv_.*")
            .allowlist_var("IBV_.*")
            .prepend_enum_name(false)
            .derive_default(true)
            .derive_debug(false)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        super::generate("ibverbs", PACKAGES, bindings)
            .write_to_file(out.join("ibverbs_bindings.rs"))
            .expect("write ibverbs_bindings.rs to OUT_DIR");
    }
}
