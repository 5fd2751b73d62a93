//! Endianness. The 82599 and VirtIO are little-endian devices; on x86
//! these are identity functions, elsewhere they swap. Kept as named
//! functions so driver code says what it means.

#[inline(always)]
pub fn cpu_to_le64(v: u64) -> u64 {
    v.to_le()
}
#[inline(always)]
pub fn le64_to_cpu(v: u64) -> u64 {
    u64::from_le(v)
}
#[inline(always)]
pub fn cpu_to_le32(v: u32) -> u32 {
    v.to_le()
}
#[inline(always)]
pub fn le32_to_cpu(v: u32) -> u32 {
    u32::from_le(v)
}
#[inline(always)]
pub fn cpu_to_le16(v: u16) -> u16 {
    v.to_le()
}
#[inline(always)]
pub fn le16_to_cpu(v: u16) -> u16 {
    u16::from_le(v)
}
