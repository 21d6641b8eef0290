"""Stand-in robot and ground assets for Isaac Lab 3's Cartpole, made from files in the installed wheel.

Isaac Lab fetches its robot assets from NVIDIA's cloud at ``gym.make`` (unreachable here). The wheel ships a full
Cartpole test stage, ``isaaclab/source/isaaclab_tasks/test/golden_stages/cartpole/physx-newton_renderer-rgb.usda``:
its ``/World/envs/env_0/Robot`` is the spawned cartpole (articulation root, slider / cart / pole bodies, the
``slider_to_cart`` and ``cart_to_pole`` joints), with visual and collision meshes instanced from
``/Flattened_Prototype_*`` root prims. :func:`make` copies that robot into a new layer as its default prim,
with the prototypes it references (minus their MDL materials), drops the root's transform (the spawner sets
it), retargets the joints' body relationships to the new paths, and writes a plain ground plane (a ``Plane``
with a CollisionAPI, which ``spawn_ground_plane`` binds its physics material to). Point ``ISAACSIM_ASSET_ROOT``
at the returned folder *before* ``isaaclab.utils.assets`` is imported. Nothing is downloaded or committed.

Ant: the ``newton`` wheel ships ``newton/examples/assets/ant.usda``, whose default prim is an ant with the eight
revolute joints Isaac Lab's ``ANT_CFG`` names (``front_left_leg`` ... ``right_back_foot``); :func:`make` exports it
where ``ANT_CFG`` looks (``Isaac/Robots/IsaacSim/Ant/ant_instanceable.usd``).
"""

from __future__ import annotations

from pathlib import Path

ROBOT = "Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd"
GROUND = "Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda"
GOLDEN = "source/isaaclab_tasks/test/golden_stages/cartpole/physx-newton_renderer-rgb.usda"
SOURCE_ROBOT = "/World/envs/env_0/Robot"
ANT = "Isaac/Robots/IsaacSim/Ant/ant_instanceable.usd"
NEWTON_ANT = "examples/assets/ant.usda"


def golden_stage() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("isaaclab")
    assert spec is not None and spec.origin is not None, "isaaclab is not installed"
    path = Path(spec.origin).parent / GOLDEN
    assert path.is_file(), f"Isaac Lab's golden Cartpole stage is missing: {path}"
    return path


def make(root: Path) -> Path:
    """Write the stand-in assets under ``root`` (an ``ISAACSIM_ASSET_ROOT``) and return ``root``."""
    robot_file, ground_file, ant_file = root / ROBOT, root / GROUND, root / ANT
    if not (robot_file.is_file() and ground_file.is_file()):
        _robot(robot_file)
        _ground(ground_file)
    if not ant_file.is_file():
        _ant(ant_file)
    return root


def _ant(target: Path) -> None:
    import importlib.util

    from pxr import Sdf

    spec = importlib.util.find_spec("newton")
    assert spec is not None and spec.origin is not None, "newton is not installed"
    source = Path(spec.origin).parent / NEWTON_ANT
    assert source.is_file(), f"newton's Ant is missing: {source}"
    target.parent.mkdir(parents=True, exist_ok=True)
    assert Sdf.Layer.FindOrOpen(str(source)).Export(str(target)), f"could not write {target}"


def _robot(target: Path) -> None:
    from pxr import Sdf

    source = Sdf.Layer.FindOrOpen(str(golden_stage()))
    layer = Sdf.Layer.CreateAnonymous(".usda")
    layer.ImportFromString(source.ExportToString().split("\n", 1)[0] + "\n")  # the header only
    for key in ("metersPerUnit", "kilogramsPerUnit", "upAxis"):
        if source.pseudoRoot.GetInfo(key) is not None:
            layer.pseudoRoot.SetInfo(key, source.pseudoRoot.GetInfo(key))
    robot = Sdf.Path("/cartpole")
    Sdf.CreatePrimInLayer(layer, robot)
    assert Sdf.CopySpec(source, Sdf.Path(SOURCE_ROBOT), layer, robot)
    for prim in source.rootPrims:  # the instanced mesh prototypes, without their MDL materials
        if prim.name.startswith("Flattened_Prototype_"):
            Sdf.CopySpec(source, prim.path, layer, prim.path)
            copied = layer.GetPrimAtPath(prim.path)
            if "Looks" in copied.nameChildren:
                del copied.nameChildren["Looks"]
    layer.defaultPrim = robot.name
    root_spec = layer.GetPrimAtPath(robot)
    for name in [p.name for p in root_spec.properties if p.name.startswith("xformOp")]:
        del root_spec.properties[name]

    def fix(path: Sdf.Path) -> None:
        spec = layer.GetObjectAtPath(path)
        if isinstance(spec, Sdf.RelationshipSpec):
            targets = [Sdf.Path(str(t).replace(SOURCE_ROBOT, str(robot))) for t in spec.targetPathList.explicitItems]
            if spec.name == "material:binding":
                spec.targetPathList.explicitItems = []
            else:
                spec.targetPathList.explicitItems = targets
        elif isinstance(spec, Sdf.PrimSpec) and "apiSchemas" in spec.ListInfoKeys():
            schemas = spec.GetInfo("apiSchemas")
            kept = [s for s in schemas.GetAddedOrExplicitItems() if s != "MaterialBindingAPI"]
            spec.SetInfo("apiSchemas", Sdf.TokenListOp.CreateExplicit(kept))

    layer.Traverse(Sdf.Path.absoluteRootPath, fix)
    target.parent.mkdir(parents=True, exist_ok=True)
    layer.Export(str(target))


def _ground(target: Path) -> None:
    from pxr import Sdf, Usd, UsdGeom, UsdPhysics

    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Usd.Stage.CreateNew(str(target))
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    root = UsdGeom.Xform.Define(stage, "/GroundPlane")
    stage.SetDefaultPrim(root.GetPrim())
    plane = UsdGeom.Plane.Define(stage, "/GroundPlane/CollisionPlane")
    plane.CreateAxisAttr(UsdGeom.Tokens.z)
    plane.CreateWidthAttr(1000.0)
    plane.CreateLengthAttr(1000.0)
    UsdPhysics.CollisionAPI.Apply(plane.GetPrim())
    assert Sdf.Path("/GroundPlane/CollisionPlane") == plane.GetPath()
    stage.GetRootLayer().Save()
