"""Each job's time per kernel in the sample intervals that ran without a hand-over (under 1.4 times
the solo median), against the solo phase before it: in_run_rate.py FILE.jsonl..."""
import json,sys,statistics as st
for fn in sys.argv[1:]:
    solo=None
    for l in open(fn):
        if l.startswith('#'): continue
        d=json.loads(l)
        s=d.get('samples')
        if not s or len(s)<5: continue
        iv=[(s[i+1][0]-s[i][0])*1e6/(s[i+1][1]-s[i][1]) for i in range(len(s)-1)]
        iv=iv[2:-1]
        med=st.median(iv)
        if d.get('mode')=='solo': solo=med
        ref=solo or med
        run=[x for x in iv if x<1.4*ref] or [float("nan")]
        print(fn.split('/')[0][:12],d['phase'],d['name'],'n=%d median us/kernel %.2f  in-run mean %.2f (%d of %d)  in-run/solo %.3f'%(len(iv),med,st.mean(run),len(run),len(iv),ref/st.mean(run)))
