//! The `linerate` command.

fn main() {
    std::process::exit(linerate::cli::main());
}
