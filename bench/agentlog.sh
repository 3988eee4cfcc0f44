# An agent's shell session on a workspace, replayed by the `reqcost_agent`
# workload (bench/reqcost.py): one command a line, each run with `sh -c` in the
# root of the folder (the mount's root, or the native folder), output to a pipe.
# $PARSED is the .parsed tree (on the native side, a plain copy of the same
# units); $PY is a Python with openpyxl.  Lines starting with # are skipped.
ls
ls -la
find . -maxdepth 2 -type d | sort | head -n 50
find . -name '*.xlsx' | head -n 20
find . -type f -name '*.md' | wc -l
grep -rn covenant --include='*.md' . | head -n 40
grep -rln 'def ' --include='*.py' . | head -n 30
grep -rn -i 'todo' --include='*.py' --include='*.js' . | head -n 20
cat $(find . -path ./.parsed -prune -o -name '*.md' -print | sort | head -n 20) | wc -c
cat $(find . -path ./.parsed -prune -o -name '*.py' -print | sort | head -n 10) | head -n 200
head -n 5 $(find . -path ./.parsed -prune -o -name '*.csv' -print | sort | head -n 10)
$PY -c 'import sys, openpyxl; [print(p, ws.title, ws.max_row, [c.value for c in next(ws.iter_rows(max_row=1))]) for p in sys.argv[1:] for ws in openpyxl.load_workbook(p, read_only=True, data_only=True).worksheets]' $(find . -path ./.parsed -prune -o -name '*.xlsx' -print | sort | head -n 5)
ls -R "$PARSED" | head -n 100
grep -rn covenant "$PARSED" | head -n 50
grep -rl -i 'total' "$PARSED" | head -n 20
cat $(find "$PARSED" -path '*.xlsx*' -type f | sort | head -n 10) | head -n 300
cat $(find "$PARSED" -path '*.pdf*' -type f | sort | head -n 10) | wc -l
grep -rn covenant . | wc -l
find . -type f | wc -l
