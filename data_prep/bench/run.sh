#!/usr/bin/env bash
# Throughput of t5scale-prep on realistic corpora: a CNN/DailyMail-like and a SAMSum-like JSONL made by
# make_corpus.py, tokenized with a 32000-piece unigram model (trained once on a sample of the CNN corpus), with 1
# and 2 tokenizer threads (and more with T5SCALE_BENCH_THREADS). Prints MB/s and examples/s per run, from the
# program's --report-json, plus wall and CPU seconds from /usr/bin/time. The 1- and 2-thread outputs are compared
# byte for byte.
#
#   data_prep/bench/run.sh BUILD_DIR [WORK_DIR]
#
# BUILD_DIR holds bin/t5scale-prep; WORK_DIR (default BUILD_DIR/prep-bench, outside git) gets the corpora, the
# model and the datasets; corpora and model are reused when present. Environment: T5SCALE_PYTHON (default python3),
# T5SCALE_BENCH_MB (size of the CNN corpus, default 200; the SAMSum one is a quarter of it),
# T5SCALE_BENCH_THREADS (default "1 2"), T5SCALE_BENCH_NICE (default 10).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:?usage: run.sh BUILD_DIR [WORK_DIR]}
build=$(cd "$build" && pwd)
work=${2:-$build/prep-bench}
python=${T5SCALE_PYTHON:-python3}
mb=${T5SCALE_BENCH_MB:-200}
threads_list=${T5SCALE_BENCH_THREADS:-1 2}
niceness=${T5SCALE_BENCH_NICE:-10}
prep=$build/bin/t5scale-prep
recipes=$root/data_prep/recipes
[[ -x $prep ]] || { echo "run.sh: no $prep (build the t5scale-prep target)" >&2; exit 2; }
mkdir -p "$work"

samsum_mb=$("$python" -c "print($mb / 4)")
[[ -f $work/cnn.jsonl ]] || nice -n "$niceness" "$python" "$root/data_prep/bench/make_corpus.py" cnn "$work/cnn.jsonl" --mb "$mb"
[[ -f $work/samsum.jsonl ]] || nice -n "$niceness" "$python" "$root/data_prep/bench/make_corpus.py" samsum "$work/samsum.jsonl" --mb "$samsum_mb"

if [[ ! -f $work/bench.model ]]; then
  # The tokenizer is trained once, on whole records from the start of the CNN corpus (about 40 MB of text).
  head -n 9000 "$work/cnn.jsonl" >"$work/tokenizer_sample.jsonl"
  echo "run.sh: training a 32000-piece tokenizer on $(du -h "$work/tokenizer_sample.jsonl" | cut -f1) of the CNN corpus"
  nice -n "$niceness" "$prep" --recipe "$recipes/cnn_dailymail.yaml" --input-split "train=$work/tokenizer_sample.jsonl" \
    --out "$work/tokenizer_sample.h5" --train-tokenizer --tokenizer-out "$work/bench.model" --vocab-size 32000 \
    --threads 2 --progress none >/dev/null
fi

printf '%-8s %8s %8s %8s %8s %8s %11s %s\n' corpus MB threads wall_s cpu_s MB/s examples/s examples
for corpus in cnn samsum; do
  recipe=$recipes/cnn_dailymail.yaml
  [[ $corpus == samsum ]] && recipe=$recipes/samsum.yaml
  for threads in $threads_list; do
    out=$work/$corpus.t$threads.h5
    report=$work/$corpus.t$threads.json
    /usr/bin/time -f "%e %U %S" -o "$work/time.txt" nice -n "$niceness" "$prep" --recipe "$recipe" \
      --input-split "train=$work/$corpus.jsonl" --out "$out" --tokenizer "$work/bench.model" --threads "$threads" \
      --progress none --report-json "$report" >/dev/null
    read -r wall user sys <"$work/time.txt"
    "$python" - "$report" "$corpus" "$threads" "$wall" "$user" "$sys" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
corpus, threads, wall, user, system = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
print(f"{corpus:<8} {report['input_bytes'] / 1e6:8.1f} {threads:>8} {wall:8.2f} {user + system:8.2f} "
      f"{report['megabytes_per_s']:8.2f} {report['examples_per_s']:11.0f} {report['examples']}")
EOF
  done
  first=$(set -- $threads_list; echo "$1")
  for threads in $threads_list; do
    cmp -s "$work/$corpus.t$first.h5" "$work/$corpus.t$threads.h5" ||
      { echo "run.sh: $corpus: $first and $threads threads wrote different files" >&2; exit 1; }
  done
done
echo "(MB/s and examples/s: the tokenizing pass as t5scale-prep times it; wall_s and cpu_s: the whole process;"
echo " $(nproc) cores here, load average $(cut -d' ' -f1-3 /proc/loadavg); outputs identical for thread counts: $threads_list)"
