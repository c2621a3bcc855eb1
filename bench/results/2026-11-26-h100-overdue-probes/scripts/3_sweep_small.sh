#!/bin/bash
# bench/run.sh part 7 (the pair sweep's 50 us and 200 us cells) with the new build
set -u
B=$PWD/.devbase; N=$B/new
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
TARGET=$N bench/run.sh $OUT/suite 7
cp $N/commit.txt $OUT/suite/commit.txt
