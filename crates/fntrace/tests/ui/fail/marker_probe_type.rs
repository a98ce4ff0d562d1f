// A probe whose argument types differ from the marker's does not compile.
fntrace::declare_marker! { static NET_RX: net_rx(len: u32, dev: &str); }

fn main() {
    let _ = NET_RX.attach(|len: u64, dev: &str| {
        let _ = (len, dev);
    });
}
