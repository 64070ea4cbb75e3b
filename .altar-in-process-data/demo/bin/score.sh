# A toy fold "model" for BusyBox sh + awk: score = weight(alt) - weight(ref) + bias.
# Usage: sh score.sh WEIGHTS VARIANTS OUT
set -eu
weights=$1 variants=$2 out=$3
mkdir -p "$(dirname "$out")"
echo "fold model ${weights##*/}: scoring $(grep -vc '^#' "$variants") variants"
awk -F '\t' -v OFS='\t' '
    NR == FNR { if ($1 !~ /^#/) w[$1] = $2; next }
    /^#/ { next }
    { printf "%s\t%s:%s:%s>%s\t%.4f\n", $5, $1, $2, $3, $4, w[$4] - w[$3] + w["bias"] }
' "$weights" "$variants" > "$out.partial"
mv "$out.partial" "$out"
echo "fold model ${weights##*/}: wrote $(wc -l < "$out") scores"
