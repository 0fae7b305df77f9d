"""What the bridges to other formats share (cs336/, hf/): loading foreign weights into posenc's
model exactly or not at all, and writing an imported run or an export through one path each,
so the two bridges cannot drift apart. Each bridge keeps only its mapping and file formats."""
