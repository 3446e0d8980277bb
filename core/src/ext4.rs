//! ext4's on-disk layout, as far as the directory prefetch reads it: where an inode lies on
//! the device, from the superblock and the group descriptors (read by the caller through
//! the block device; layout as in the kernel's fs/ext4/ext4.h).

/// Where the superblock starts on the device, and the bytes of it read here.
pub const SUPERBLOCK_AT: u64 = 1024;
pub const SUPERBLOCK_LEN: usize = 0x100;

const MAGIC: u16 = 0xEF53;
/// s_feature_incompat bits: descriptors of 64 bytes or more; the descriptors spread over
/// the groups instead of in one table after the superblock (not handled here).
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_META_BG: u32 = 0x10;

/// What the superblock says of where inodes lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub block_size: u64,
    inodes_per_group: u64,
    inode_size: u64,
    desc_size: u64,
    /// Device offset of the group descriptor table.
    descriptors_at: u64,
}

fn le16(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as u64)
}

fn le32(b: &[u8], at: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as u64)
}

impl Layout {
    /// From the superblock's first `SUPERBLOCK_LEN` bytes. None unless it is ext4's (or
    /// ext2/3's), sane, and its descriptors lie in one table (no meta_bg).
    pub fn parse(sb: &[u8]) -> Option<Layout> {
        if le16(sb, 0x38)? != MAGIC as u64 {
            return None;
        }
        let log_block = le32(sb, 0x18)?;
        let incompat = le32(sb, 0x60)? as u32;
        if log_block > 6 || incompat & INCOMPAT_META_BG != 0 {
            return None;
        }
        let block_size = 1024u64 << log_block;
        let inode_size = if le32(sb, 0x4C)? == 0 {
            128
        } else {
            le16(sb, 0x58)?
        };
        let desc_size = if incompat & INCOMPAT_64BIT != 0 {
            le16(sb, 0xFE)?
        } else {
            32
        };
        let inodes_per_group = le32(sb, 0x28)?;
        if !(128..=block_size).contains(&inode_size)
            || !inode_size.is_power_of_two()
            || desc_size < 32
            || inodes_per_group == 0
        {
            return None;
        }
        Some(Layout {
            block_size,
            inodes_per_group,
            inode_size,
            desc_size,
            // The block after the one holding the superblock (block 0, or 1 with 1 KiB
            // blocks), as the kernel's descriptor_loc has it: not s_first_data_block + 1,
            // which is 0 + 1 on a 1 KiB-block bigalloc filesystem.
            descriptors_at: (SUPERBLOCK_AT / block_size + 1) * block_size,
        })
    }

    /// The block group inode `ino` belongs to (inodes count from 1).
    pub fn group_of(&self, ino: u64) -> u64 {
        ino.saturating_sub(1) / self.inodes_per_group
    }

    /// Where group `group`'s descriptor lies, and how many bytes of it to read.
    pub fn descriptor(&self, group: u64) -> (u64, usize) {
        (
            self.descriptors_at
                .saturating_add(group.saturating_mul(self.desc_size)),
            self.desc_size.min(64) as usize,
        )
    }

    /// The first block of the group's inode table, from its descriptor's bytes.
    pub fn inode_table(&self, desc: &[u8]) -> Option<u64> {
        let lo = le32(desc, 0x8)?;
        let hi = if self.desc_size >= 64 {
            le32(desc, 0x28)?
        } else {
            0
        };
        Some(hi << 32 | lo)
    }

    /// The device offset of the block holding inode `ino`, given its group's inode table.
    pub fn inode_block_at(&self, ino: u64, table: u64) -> u64 {
        let index = ino.saturating_sub(1) % self.inodes_per_group;
        // Saturating: a descriptor read wrong gives an offset past the device's end, where
        // a readahead reads nothing, never a wrapped one.
        let block = table.saturating_add(index * self.inode_size / self.block_size);
        block.saturating_mul(self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A superblock as mkfs.ext4 makes one on the 8 GiB benchmark images: 4 KiB blocks,
    /// 32768 inodes of 256 bytes a group, 64-bit descriptors of 64 bytes.
    fn superblock(incompat: u32) -> Vec<u8> {
        let mut sb = vec![0u8; SUPERBLOCK_LEN];
        sb[0x18..0x1C].copy_from_slice(&2u32.to_le_bytes());
        sb[0x28..0x2C].copy_from_slice(&32768u32.to_le_bytes());
        sb[0x38..0x3A].copy_from_slice(&MAGIC.to_le_bytes());
        sb[0x4C..0x50].copy_from_slice(&1u32.to_le_bytes());
        sb[0x58..0x5A].copy_from_slice(&256u16.to_le_bytes());
        sb[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
        sb[0xFE..0x100].copy_from_slice(&64u16.to_le_bytes());
        sb
    }

    #[test]
    fn an_inode_is_found_in_its_groups_table() {
        let l = Layout::parse(&superblock(INCOMPAT_64BIT | 0x2)).unwrap();
        assert_eq!(l.block_size, 4096);
        // Inode 1572865 (the aged directory of the benchmark image): group 48, index 0.
        assert_eq!(l.group_of(1_572_865), 48);
        assert_eq!(l.descriptor(48), (4096 + 48 * 64, 64));
        let mut desc = [0u8; 64];
        desc[0x8..0xC].copy_from_slice(&1_049_121u32.to_le_bytes());
        desc[0x28..0x2C].copy_from_slice(&1u32.to_le_bytes());
        let table = l.inode_table(&desc).unwrap();
        assert_eq!(table, (1 << 32) + 1_049_121);
        assert_eq!(l.inode_block_at(1_572_865, table), table * 4096);
        // 16 inodes of 256 bytes a block: the 17th of the group is in the table's second.
        assert_eq!(l.inode_block_at(1_572_865 + 16, table), (table + 1) * 4096);
        assert_eq!(l.inode_block_at(1_572_865 + 15, table), table * 4096);
    }

    #[test]
    fn descriptors_follow_the_superblocks_block() {
        // 1 KiB blocks: the superblock is block 1, the descriptors block 2, whatever
        // s_first_data_block says (0 with bigalloc).
        let mut sb = superblock(0);
        sb[0x18..0x1C].copy_from_slice(&0u32.to_le_bytes());
        let l = Layout::parse(&sb).unwrap();
        assert_eq!(l.descriptor(0), (2048, 32));
        sb[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(Layout::parse(&sb).unwrap().descriptor(0), (2048, 32));
    }

    #[test]
    fn descriptors_are_32_bytes_without_64bit() {
        let l = Layout::parse(&superblock(0x2)).unwrap();
        assert_eq!(l.descriptor(3), (4096 + 3 * 32, 32));
        let mut desc = [0u8; 32];
        desc[0x8..0xC].copy_from_slice(&77u32.to_le_bytes());
        assert_eq!(l.inode_table(&desc), Some(77));
    }

    #[test]
    fn not_ext4_or_meta_bg_is_none() {
        let mut sb = superblock(0);
        sb[0x38] = 0;
        assert_eq!(Layout::parse(&sb), None);
        assert_eq!(Layout::parse(&superblock(INCOMPAT_META_BG)), None);
        assert_eq!(Layout::parse(&[0u8; 16]), None);
    }
}
