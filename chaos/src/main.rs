mod check;
fn main() {}
