// What the browser player's page (crates/app/src/demo/static/play.js) takes from three.js:
// scripts/build-three.sh bundles only these, with what they need, into three.min.js.
export {
  Color, CylinderGeometry, BoxGeometry, DirectionalLight, Euler, Group, HemisphereLight, Mesh,
  MeshStandardMaterial, PerspectiveCamera, Plane, PlaneGeometry, Quaternion, Raycaster, Scene,
  SphereGeometry, Vector2, Vector3, WebGLRenderer,
} from "three";
