fn main() -> std::process::ExitCode {
    sunaba_images::main_entry()
}
