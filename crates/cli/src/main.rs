//! The `nfkit` command.
fn main() {
    println!("nfkit: under construction");
}
