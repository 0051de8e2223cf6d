import re, subprocess, sys
src = open(sys.argv[1]).read().split('\n')
fs = src.index('def _front2d(S, nb, lc, av, exp_bits, exp_bias):')
end = [i for i in range(fs, len(src)) if src[i].strip() == 'return spec != _I32(0)'][0]
spec_line = end - 1
def variant(cut_pred, keep_expr, tag):
    body = src[fs:]
    cut = [i for i in range(fs, spec_line) if cut_pred(src[i])][0]
    lines = src[:cut + 1] + [f'        S[_RPOS * G + j] = _I32({keep_expr})', src[spec_line], src[end]] + src[end + 1:]
    open(f'zfp_b{tag}.py', 'w').write('\n'.join(lines))
    subprocess.run(f'rm -rf __pycache__/zfp_b{tag}*', shell=True)
    out = subprocess.run(['nice', '-n', '15', '/work/main/.venv/bin/python', 'asm.py', f'zfp_b{tag}', '_front2d'], capture_output=True, text=True)
    print(tag, out.stdout.strip(), out.stderr[-300:])
V = sys.argv[2:]
if 'ws' in V: variant(lambda l: l.strip().startswith('ws4 = '), 'ws0+ws1+ws2+ws3+ws4', 'ws')
if 'ws0' in V: variant(lambda l: l.strip().startswith('ws0 = '), 'ws0', 'ws0')
if 'p' in V: variant(lambda l: l.strip().startswith('p = _I32(exp_bits + 10)'), 'p+ws0+ws4', 'p')
if 'f0' in V: variant(lambda l: 'S[(_RPOS + 0) * G + j] = p' in l, 'p', 'f0')

for v in V:
    if v.startswith('F'):
        k = int(v[1:])
        variant(lambda l, k=k: f'S[(_RPOS + {k}) * G + j] = p' in l, 'p', v)
