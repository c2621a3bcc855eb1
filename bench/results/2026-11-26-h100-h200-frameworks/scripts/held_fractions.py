"""The fraction of a span each session held a lease, from a daemon trace (grant to Renew or
Release): held_fractions.py LOG.xz FROM_EPOCH_S TO_EPOCH_S"""
import sys,re,datetime,collections,lzma
def ts(s): return datetime.datetime.fromisoformat(s.rstrip('Z')+'+00:00').timestamp()
fn,t0,t1=sys.argv[1],float(sys.argv[2]),float(sys.argv[3])
held=collections.Counter(); cur=None; since=None; last=None
grants=collections.Counter(); gap_ren=[]; lastext={}
for l in lzma.open(fn,'rt'):
    m=re.match(r'(\S+)\s+TRACE (request session=(\d+) request=(\w+)|grant .*session=(\d+) lease_ns)',l)
    if not m: continue
    t=ts(m.group(1))
    if t<t0 or t>t1: continue
    if m.group(5):
        s=m.group(5); grants[s]+=1
        if cur is not None and since is not None: pass
        cur, since = s, t
    elif m.group(4) in ('Renew','Release') and m.group(3)==cur:
        held[cur]+=t-since; cur=None
        if m.group(3) in lastext: gap_ren.append(t-lastext[m.group(3)])
    elif m.group(4)=='Extend': lastext[m.group(3)]=t
tot=t1-t0
print('held fraction', {k:round(v/tot,3) for k,v in held.items()}, 'sum', round(sum(held.values())/tot,3))
print('grants',dict(grants))
