// Link-time settings of libdropbehind.so that decide what every process pays to load it.
fn main() {
    // The library's own references to the functions it exports (std calling `read`,
    // `write`, `close`... which are the hooks) are bound when linking, not by a symbol
    // lookup at every start: they would find the hooks anyway, the library being loaded
    // before libc.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}
