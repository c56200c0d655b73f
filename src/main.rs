//! The binary: everything is in the library; this only hands over to
//! [`sunaba_images::main_entry`], which parses, runs and maps the exit status.

fn main() -> std::process::ExitCode {
    sunaba_images::main_entry()
}
