# Merge the fold scores into one table: the mean score per variant across folds.
# Usage: sh summarize.sh OUT FOLD_SCORES...
# The plan lists the fold score files as this task's inputs, so the runner starts it only after
# every fold task succeeded.
set -eu
out=$1
shift
mkdir -p "$(dirname "$out")"
awk -F '\t' -v OFS='\t' '
    !($1 in n) { order[++count] = $1; site[$1] = $2 }
    {
        sum[$1] += $3; n[$1]++
        if (!($1 in lo) || $3 < lo[$1]) lo[$1] = $3
        if (!($1 in hi) || $3 > hi[$1]) hi[$1] = $3
    }
    END {
        print "variant", "site", "mean_score", "min", "max", "folds"
        for (i = 1; i <= count; i++) {
            id = order[i]
            printf "%s\t%s\t%.4f\t%.4f\t%.4f\t%d\n", id, site[id], sum[id] / n[id], lo[id], hi[id], n[id]
        }
    }
' "$@" > "$out.partial"
mv "$out.partial" "$out"
cat "$out"
