import ncdc
from ncdc.ir.rewrites import stable_composition
from ncdc.ir import dataflow
spec = ncdc.load()
site = spec.site("Attention Core")
body = site.node.body
g = dataflow.flatten(body)
for i,(st,r,w) in enumerate(zip(g.steps,g.reads,g.writes)):
    print(i, type(st).__name__, getattr(getattr(st,'operator',None),'formula',type(getattr(st,'operator',None)).__name__), r, w)
print(g.result)
out = stable_composition(body)
print(out is body)
g2 = dataflow.flatten(out)
for i,(st,r,w) in enumerate(zip(g2.steps,g2.reads,g2.writes)):
    print(i, type(st).__name__, getattr(getattr(st,'operator',None),'formula',type(getattr(st,'operator',None)).__name__), r, w, [str(g2.types[k]) for k in w])
print(out.dom, out.cod)
