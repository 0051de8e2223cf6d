import onnx,sys,collections
for d in sys.argv[1:]:
    m=onnx.load(d+'/training_model.onnx',load_external_data=False)
    c=collections.Counter(n.op_type for n in m.graph.node if n.domain=='ai.onnx.contrib')
    small=0
    print(d, 'nodes',len(m.graph.node),'pyops',sum(c.values()), dict(c))
